package cli

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// runApp runs the command line with args, as Run does but writing to a
// buffer; not in parallel (it sets os.Args).
func runApp(t *testing.T, args ...string) (string, error) {
	t.Helper()
	app := App()
	var out bytes.Buffer
	app.Writer = &out
	// urfave/cli's completion reads the word before the flag from os.Args.
	saved := os.Args
	defer func() { os.Args = saved }()
	os.Args = append([]string{"nodeup"}, args...)
	err := app.Run(os.Args)
	return out.String(), err
}

func TestCompletionListsCommandsAndFlags(t *testing.T) {
	out, err := runApp(t, completeFlag)
	if err != nil || !strings.Contains(out, "start\n") || !strings.Contains(out, "completion\n") {
		t.Fatalf("top-level completion: %v\n%s", err, out)
	}
	out, err = runApp(t, "start", "--num", completeFlag)
	if err != nil || !strings.Contains(out, "--num-cpus") || !strings.Contains(out, "--num-gpus") || strings.Contains(out, "--bind") {
		t.Fatalf("start --num completion: %v\n%s", err, out)
	}
	out, err = runApp(t, "kv", completeFlag)
	if err != nil || !strings.Contains(out, "put\n") {
		t.Fatalf("kv completion: %v\n%s", err, out)
	}
}

func TestCompletionScripts(t *testing.T) {
	for shell, want := range map[string]string{"bash": "complete -o bashdefault -o default -o nospace -F _nodeup_bash_autocomplete nodeup", "zsh": "#compdef nodeup"} {
		out, err := runApp(t, "completion", shell)
		if err != nil || !strings.Contains(out, want) || !strings.Contains(out, completeFlag) {
			t.Errorf("completion %s: %v\n%s", shell, err, out)
			continue
		}
		if sh, err := exec.LookPath(shell); err == nil { // syntax check where the shell is installed
			f := filepath.Join(t.TempDir(), shell)
			if err := os.WriteFile(f, []byte(out), 0o600); err != nil {
				t.Fatal(err)
			}
			if b, err := exec.Command(sh, "-n", f).CombinedOutput(); err != nil {
				t.Errorf("%s -n: %v: %s", shell, err, b)
			}
		}
	}
	if _, err := runApp(t, "completion", "fish"); err == nil || !strings.Contains(err.Error(), `"fish"`) || !strings.Contains(err.Error(), "bash or zsh") {
		t.Errorf("completion fish: got %v", err)
	}
}
