package worker

import (
	"testing"

	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// Every method a core worker serves needs a role in wire.MethodRoles, or
// a node enforcing roles would refuse it to everyone.
func TestCoreWorkerMethodsHaveRoles(t *testing.T) {
	s := rpc.NewServer(nil, wire.ProtocolVersion)
	cw := &coreWorker{isWorker: true}
	cw.registerMethods(s)
	methods := s.Methods()
	if len(methods) < 7 {
		t.Fatalf("core worker registered %d methods, want at least 7: %v", len(methods), methods)
	}
	for _, m := range methods {
		if _, ok := wire.MethodRole(m); !ok {
			t.Errorf("core worker method %s has no entry in wire.MethodRoles", m)
		}
	}
}
