package wire

import (
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
)

// Environment a node starts a worker process with; the SDK reads it in Init.
const (
	EnvWorkerMode = "NODEUP_WORKER"    // "1" in worker processes
	EnvNodeAddr   = "NODEUP_NODE_ADDR" // the node's RPC address
	// EnvNodeSocket is the node's Unix socket as an address
	// ("unix:///data/nodeup.sock"): the worker reaches its node over it,
	// as the local principal; unset when the node has none.
	EnvNodeSocket = "NODEUP_NODE_SOCKET"
	// EnvToken is the token a driver or the CLI presents to a node it
	// reaches over TCP (rpc.WithToken), as --token does.
	EnvToken = "NODEUP_TOKEN"
	EnvJobID = "NODEUP_JOB_ID" // the job the worker serves
	// EnvJobToken is the job's token (JobRegisterReply.JobToken), which a
	// worker process presents to every core worker and node it calls and
	// requires of every connection to its own port; unset with --insecure.
	EnvJobToken  = "NODEUP_JOB_TOKEN"
	EnvWorkerID  = "NODEUP_WORKER_ID"  // this worker's ID
	EnvBindIP    = "NODEUP_BIND_IP"    // IP the worker's RPC server listens on
	EnvNodeID    = "NODEUP_NODE_ID"    // the node's ID
	EnvNodeName  = "NODEUP_NODE_NAME"  // the node's name
	EnvArenaPath = "NODEUP_ARENA_PATH" // the node's object store file
	EnvActorID   = "NODEUP_ACTOR_ID"   // set in an actor's dedicated worker process
	// EnvBinaryHash is the sha256 (hex) of the worker's own executable, so a
	// worker need not hash tens of MiB at every start.
	EnvBinaryHash = "NODEUP_BINARY_HASH"
	// EnvNamespace carries the job's namespace to its worker processes
	// (unset for the default namespace).
	EnvNamespace = "NODEUP_NAMESPACE"
	// EnvRuntimeEnv holds the worker's runtime env vars (the lease's or
	// actor's EnvVars, also set as variables of their own) as a JSON object,
	// so the SDK in the worker knows which variables its child tasks and
	// actors inherit; unset when there are none.
	EnvRuntimeEnv = "NODEUP_RUNTIME_ENV"
)

// EnvPyExecutable is the runtime env key under which a Python job's work
// names the interpreter its worker processes run (Ray's runtime_env
// py_executable): an absolute path, checked on each node when it starts
// such a worker (a path that is not an executable file there fails the
// work with CodeRuntimeEnvSetupFailed). The node's --python otherwise.
const EnvPyExecutable = "NODEUP_PY_EXECUTABLE"

// maxPyExecutable bounds an EnvPyExecutable path, in bytes (PATH_MAX).
const maxPyExecutable = 4096

// ReservedEnvPrefix starts the variables nodeup sets in worker processes;
// a runtime env may not set them.
const ReservedEnvPrefix = "NODEUP_"

// reservedEnvVars are the GPU visibility variables the node sets in every
// worker process (gpu.Assignment.Env); a runtime env may not set them.
var reservedEnvVars = []string{"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"}

// ValidateEnvVar checks one runtime env variable (Ray's runtime_env
// env_vars entry): the key must be non-empty and contain no '=' or NUL
// byte, the value no NUL byte, and the key must not be one nodeup sets
// itself (NODEUP_*, CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES,
// CUDA_DEVICE_ORDER), but for EnvWorkingDir, whose value must then be a
// working dir ref (ParseWorkingDirRef), and EnvPyExecutable, a clean
// absolute path. The error names the key and what
// is accepted.
func ValidateEnvVar(key, value string) error {
	switch {
	case key == EnvWorkingDir:
		_, _, err := ParseWorkingDirRef(value)
		return err
	case key == EnvPyExecutable:
		if !strings.HasPrefix(value, "/") || len(value) > maxPyExecutable || strings.IndexByte(value, 0) >= 0 || path.Clean(value) != value {
			return fmt.Errorf("runtime env py_executable %q: want a clean absolute path of at most %d bytes", value, maxPyExecutable)
		}
		return nil
	case key == "":
		return fmt.Errorf("env var key %q: must not be empty", key)
	case strings.ContainsAny(key, "=\x00"):
		return fmt.Errorf("env var key %q: must not contain '=' or a NUL byte", key)
	case strings.IndexByte(value, 0) >= 0:
		return fmt.Errorf("env var %q: value must not contain a NUL byte", key)
	case strings.HasPrefix(key, ReservedEnvPrefix):
		return fmt.Errorf("env var %q: %s* variables are reserved for nodeup", key, ReservedEnvPrefix)
	case slices.Contains(reservedEnvVars, key):
		return fmt.Errorf("env var %q: set by the node for the worker's GPUs (reserved: %s)", key, strings.Join(reservedEnvVars, ", "))
	}
	return nil
}

// ValidateEnvVars checks every entry of vars with ValidateEnvVar, in key
// order, and returns the first error.
func ValidateEnvVars(vars map[string]string) error {
	for _, k := range slices.Sorted(maps.Keys(vars)) {
		if err := ValidateEnvVar(k, vars[k]); err != nil {
			return err
		}
	}
	return nil
}
