package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"

	pyembed "github.com/nodeup/nodeup/python"
	"github.com/nodeup/nodeup/wire"
)

// command is how a worker process of spec starts: a Go job runs its cached
// binary; a Python job runs `<python> -m nodeup.worker` with the nodeup
// package this binary carries first on PYTHONPATH, so the workers speak
// the node's protocol version whatever the machine has installed.
// extraEnv comes before the lease's own variables.
func (p *workerPool) command(spec procSpec) (argv, extraEnv []string, err error) {
	switch spec.lang {
	case wire.LanguageGo:
		bin, err := p.binPath(spec.binHash)
		if err != nil {
			return nil, nil, err
		}
		return []string{bin}, nil, nil
	case wire.LanguagePython:
		pkg := p.cfg.pythonPath
		if pkg == nil {
			pkg = pyembed.Path
		}
		dir, err := pkg()
		if err != nil {
			return nil, nil, err
		}
		pp := dir
		if old := os.Getenv("PYTHONPATH"); old != "" {
			pp += string(os.PathListSeparator) + old
		}
		py := p.cfg.python
		if py == "" {
			py = defaultPython()
		}
		if exe := spec.envVars[wire.EnvPyExecutable]; exe != "" {
			if err := checkPyExecutable(exe); err != nil {
				return nil, nil, fmt.Errorf("%w: runtime env py_executable: %w", errRuntimeEnvSetup, err)
			}
			py = exe
		}
		return []string{py, "-m", "nodeup.worker"}, []string{"PYTHONPATH=" + pp, "PYTHONUNBUFFERED=1"}, nil
	}
	return nil, nil, fmt.Errorf("job language %q is not one of \"\" (Go) and %q", spec.lang, wire.LanguagePython)
}

// checkPyExecutable says why exe (a runtime env py_executable, an
// absolute path wire.ValidateEnvVar checked) cannot be a Python worker's
// interpreter on this node: not there, not a regular file (after
// symlinks), or not executable.
func checkPyExecutable(exe string) error {
	fi, err := os.Stat(exe)
	switch {
	case err != nil:
		return fmt.Errorf("%s on this node: %w", exe, err)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%s on this node is a %s, not an executable file", exe, fi.Mode().Type())
	case fi.Mode().Perm()&0o111 == 0:
		return fmt.Errorf("%s on this node is not executable (mode %s)", exe, fi.Mode().Perm())
	}
	return nil
}

// debianPython is Debian's interpreter, the one python3-msgpack and
// python3-cloudpickle install into.
const debianPython = "/usr/bin/python3"

var (
	defaultPythonOnce sync.Once
	defaultPythonPath string
)

// defaultPython is the interpreter of Python workers when the node has no
// --python: debianPython when it imports msgpack and cloudpickle (checked
// once per process), else python3 from PATH.
func defaultPython() string {
	defaultPythonOnce.Do(func() {
		defaultPythonPath = "python3"
		out, err := exec.Command(debianPython, "-c", "import msgpack, cloudpickle; print('ok')").Output()
		if err == nil && strings.TrimSpace(string(out)) == "ok" {
			defaultPythonPath = debianPython
		}
	})
	return defaultPythonPath
}
