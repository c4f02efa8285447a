package cli

import (
	"fmt"

	ucli "github.com/urfave/cli/v2"
)

// completeFlag is the last argument with which a shell's completion
// function asks nodeup for the words that may come next (urfave/cli's
// EnableBashCompletion; the scripts below send it).
const completeFlag = "--generate-bash-completion"

// completionScripts are urfave/cli v2's autocomplete/bash_autocomplete and
// zsh_autocomplete, with the program name filled in.
var completionScripts = map[string]string{
	"bash": `# nodeup bash completion: source it, or put it in /etc/bash_completion.d/nodeup
_nodeup_init_completion() {
  COMPREPLY=()
  _get_comp_words_by_ref "$@" cur prev words cword
}

_nodeup_bash_autocomplete() {
  if [[ "${COMP_WORDS[0]}" != "source" ]]; then
    local cur opts base words
    COMPREPLY=()
    cur="${COMP_WORDS[COMP_CWORD]}"
    if declare -F _init_completion >/dev/null 2>&1; then
      _init_completion -n "=:" || return
    else
      _nodeup_init_completion -n "=:" || return
    fi
    words=("${words[@]:0:$cword}")
    if [[ "$cur" == "-"* ]]; then
      requestComp="${words[*]} ${cur} ` + completeFlag + `"
    else
      requestComp="${words[*]} ` + completeFlag + `"
    fi
    opts=$(eval "${requestComp}" 2>/dev/null)
    COMPREPLY=($(compgen -W "${opts}" -- ${cur}))
    return 0
  fi
}

complete -o bashdefault -o default -o nospace -F _nodeup_bash_autocomplete nodeup
`,
	"zsh": `#compdef nodeup
# nodeup zsh completion: put it in a directory on $fpath as _nodeup, or source it

_nodeup_zsh_autocomplete() {
  local -a opts
  local cur
  cur=${words[-1]}
  if [[ "$cur" == "-"* ]]; then
    opts=("${(@f)$(${words[@]:0:#words[@]-1} ${cur} ` + completeFlag + `)}")
  else
    opts=("${(@f)$(${words[@]:0:#words[@]-1} ` + completeFlag + `)}")
  fi

  if [[ "${opts[1]}" != "" ]]; then
    _describe 'values' opts
  else
    _files
  fi
}

compdef _nodeup_zsh_autocomplete nodeup
`,
}

// completionCommand is `nodeup completion bash|zsh`: it prints the shell's
// completion script, which asks nodeup itself for the next words, so the
// completions always match the binary.
func completionCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "completion",
		Usage:     "print a shell completion script: source <(nodeup completion bash), or for zsh nodeup completion zsh > \"${fpath[1]}/_nodeup\"",
		ArgsUsage: "bash|zsh",
		Action: func(c *ucli.Context) error {
			shell := c.Args().First()
			script, ok := completionScripts[shell]
			if c.NArg() != 1 || !ok {
				return fmt.Errorf("nodeup completion %q: name one shell, bash or zsh", shell)
			}
			_, err := fmt.Fprint(c.App.Writer, script)
			return err
		},
	}
}
