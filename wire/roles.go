package wire

import (
	"strings"

	"github.com/nodeup/nodeup/internal/pki"
	"github.com/nodeup/nodeup/rpc"
)

// MethodRoles is the one table of what role each RPC method needs (issue
// 15): a connection may call a method when its role allows the method's
// (pki.Role.Allows: admin allows everything, every role allows read). A
// method missing here is refused to everyone, so nothing is open by
// accident; TestEveryRegisteredMethodHasARole (package cluster) fails when
// a method a node or core worker registers has no entry. The leader-only
// variant of a method (LeaderSuffix) needs what the method needs.
//
// Methods only nodes call of each other (heartbeats, the two-phase bundle
// reservation, actor placement, binary and object transfers between
// nodes) need admin: a node's principal and the local principal (the Unix
// socket) hold every role, and so does an admin token.
var MethodRoles = map[string]pki.Role{
	MethodHello:         RoleOpen,
	MethodStatus:        pki.RoleRead,
	MethodNodeRegister:  pki.RoleAdmin,
	MethodNodeHeartbeat: pki.RoleAdmin,
	MethodKVGet:         pki.RoleRead,
	MethodKVList:        pki.RoleRead,
	MethodKVSet:         pki.RoleSubmit,
	MethodKVDelete:      pki.RoleSubmit,
	MethodRaftStats:     pki.RoleRead,
	MethodRaftLeave:     pki.RoleAdmin,
	// Operator (issue 19): listing peers is a read; changing the Raft
	// configuration or the whole state, or reading every token's hash, is
	// admin's.
	MethodRaftPeers:       pki.RoleRead,
	MethodRaftRemovePeer:  pki.RoleAdmin,
	MethodSnapshotSave:    pki.RoleAdmin,
	MethodSnapshotRestore: pki.RoleAdmin,
	MethodNodeDrain:       pki.RoleAdmin,
	MethodNodeEligibility: pki.RoleAdmin,
	MethodNodeDrainStop:   pki.RoleAdmin,
	MethodJobRegister:     pki.RoleSubmit,
	MethodJobFinish:       pki.RoleSubmit,
	MethodBinaryFetch:     pki.RoleAdmin,
	MethodLease:           pki.RoleSubmit,
	MethodLeaseReturn:     pki.RoleSubmit,
	MethodBlocked:         pki.RoleSubmit,
	MethodUnblocked:       pki.RoleSubmit,
	MethodWorkerRegister:  pki.RoleAdmin,
	MethodClusterView:     pki.RoleRead,
	MethodObjectCreate:    pki.RoleSubmit,
	MethodObjectSeal:      pki.RoleSubmit,
	MethodObjectAbort:     pki.RoleSubmit,
	MethodObjectLocate:    pki.RoleRead,
	MethodObjectRead:      pki.RoleSubmit,
	MethodObjectWrite:     pki.RoleSubmit,
	MethodObjectFree:      pki.RoleSubmit,
	MethodObjectList:      pki.RoleRead,
	MethodLogsList:        pki.RoleRead,
	MethodLogsRead:        pki.RoleRead,
	MethodObjectRelease:   pki.RoleSubmit,
	// Task events (issue 17): a core worker reports its own tasks' state
	// changes; listing them is a read.
	MethodTaskEventsReport: pki.RoleSubmit,
	MethodTaskEventsList:   pki.RoleRead,
	MethodWorkerList:       pki.RoleRead,
	MethodActorCreate:      pki.RoleSubmit,
	MethodActorGet:         pki.RoleRead,
	MethodActorList:        pki.RoleRead,
	MethodActorKill:        pki.RoleSubmit,
	MethodActorDied:        pki.RoleAdmin,
	MethodActorJobDone:     pki.RoleAdmin,
	MethodActorStart:       pki.RoleAdmin,
	MethodActorStop:        pki.RoleAdmin,
	MethodPGCreate:         pki.RoleSubmit,
	MethodPGGet:            pki.RoleRead,
	MethodPGList:           pki.RoleRead,
	MethodPGRemove:         pki.RoleSubmit,
	MethodPGPrepare:        pki.RoleAdmin,
	MethodPGCommit:         pki.RoleAdmin,
	MethodPGReturn:         pki.RoleAdmin,
	// Identity: a joining node has no certificate yet, so Node.Join is
	// open and checks the join token in its body; renewal comes from a
	// node (its certificate); tokens and the gossip keyring are admin's.
	MethodNodeJoin:      RoleOpen,
	MethodNodeRenew:     pki.RoleAdmin,
	MethodKeyringSet:    pki.RoleAdmin,
	MethodKeyringRotate: pki.RoleAdmin,
	MethodTokenCreate:   pki.RoleAdmin,
	MethodTokenList:     pki.RoleAdmin,
	MethodTokenRevoke:   pki.RoleAdmin,
	MethodJobMissing:    pki.RoleSubmit,
	MethodJobUpload:     pki.RoleSubmit,
	MethodJobSubmit:     pki.RoleSubmit,
	MethodJobStop:       pki.RoleSubmit,
	MethodJobDelete:     pki.RoleSubmit,
	MethodJobGet:        pki.RoleRead,
	MethodJobList:       pki.RoleRead,
	MethodJobLogs:       pki.RoleRead,
	MethodJobWrite:      pki.RoleAdmin,
	MethodJobRun:        pki.RoleAdmin,
	MethodJobChunk:      pki.RoleAdmin,
	MethodJobTokenOf:    pki.RoleAdmin,
	// A core worker resolving a token presented to it; any holder of a
	// submit token (a job's own) may ask, and learns only the token's
	// role and job.
	MethodAuthCheck: pki.RoleSubmit,
	// A core worker's TLS certificate for serving other core workers: any
	// process that may run a job's code may serve its calls.
	MethodWorkerCert: pki.RoleSubmit,
	// Served by core workers (drivers and worker processes).
	MethodPushTask:         pki.RoleSubmit,
	MethodLeaseRevoke:      pki.RoleAdmin,
	MethodTaskCancel:       pki.RoleSubmit,
	MethodOwnerCancel:      pki.RoleSubmit,
	MethodActorConstruct:   pki.RoleSubmit,
	MethodActorCall:        pki.RoleSubmit,
	MethodObjectGet:        pki.RoleRead,
	MethodObjectGetMany:    pki.RoleRead,
	MethodObjectRefRemoved: pki.RoleSubmit,
	MethodObjectBorrowed:   pki.RoleSubmit,
	MethodObjectRecover:    pki.RoleSubmit,
	MethodObjectRefs:       pki.RoleRead,
}

// RoleOpen marks a method anyone may call, an anonymous connection too:
// only Cluster.Hello (a joiner learns the cluster) and Node.Join (its body
// carries the join token the leader checks). It is no token's role.
const RoleOpen pki.Role = "open"

// HTTPRoles is the role each endpoint of a node's HTTP API needs, by its
// pattern as registered (net/http's "METHOD /path"); "" is open to anyone
// (the health check load balancers probe). A request presents a token as
// "Authorization: Bearer <token>". The node refuses to register an
// endpoint missing here.
var HTTPRoles = map[string]pki.Role{
	"GET /v1/health": "",
	"GET /v1/status": pki.RoleRead,
	"GET /metrics":   pki.RoleRead,
	// The dashboard's static files hold no cluster data: the page asks
	// for a read token and sends it with its API calls.
	"GET /":                      "",
	"GET /v1/actors":             pki.RoleRead,
	"GET /v1/placement-groups":   pki.RoleRead,
	"GET /v1/tasks":              pki.RoleRead,
	"GET /v1/logs":               pki.RoleRead,
	"GET /v1/logs/{node}/{name}": pki.RoleRead,
	// The jobs API, as the Job.* methods: reads need read; submit, stop
	// and delete need submit.
	"POST /v1/jobs":           pki.RoleSubmit,
	"GET /v1/jobs":            pki.RoleRead,
	"GET /v1/jobs/{id}":       pki.RoleRead,
	"GET /v1/jobs/{id}/logs":  pki.RoleRead,
	"POST /v1/jobs/{id}/stop": pki.RoleSubmit,
	"DELETE /v1/jobs/{id}":    pki.RoleSubmit,
	// Go's profiler, only with --enable-debug (issue 19): admin's, as it
	// shows the command line and can stall the node while it profiles.
	"GET /debug/pprof/":        pki.RoleAdmin,
	"GET /debug/pprof/cmdline": pki.RoleAdmin,
	"GET /debug/pprof/profile": pki.RoleAdmin,
	"GET /debug/pprof/symbol":  pki.RoleAdmin,
	"GET /debug/pprof/trace":   pki.RoleAdmin,
}

// MethodRole returns the role method needs (MethodRoles, the leader-only
// variant as its method), false when the table has none.
func MethodRole(method string) (pki.Role, bool) {
	r, ok := MethodRoles[strings.TrimSuffix(method, LeaderSuffix)]
	return r, ok
}

// The bits of rpc.Grants each role stands for.
const (
	GrantRead rpc.Grants = 1 << iota
	GrantSubmit
	GrantJoin
	GrantAdmin
	// GrantOpen is held by every principal, the anonymous one too: it
	// allows the methods of role RoleOpen.
	GrantOpen
	// GrantAll holds every role: nodes and local (Unix socket) clients.
	GrantAll rpc.Grants = GrantRead | GrantSubmit | GrantJoin | GrantAdmin | GrantOpen
)

// roleBit is the bit of one role, 0 for a string that is none.
func roleBit(r pki.Role) rpc.Grants {
	switch r {
	case pki.RoleRead:
		return GrantRead
	case pki.RoleSubmit:
		return GrantSubmit
	case pki.RoleJoin:
		return GrantJoin
	case pki.RoleAdmin:
		return GrantAdmin
	case RoleOpen:
		return GrantOpen
	}
	return 0
}

// GrantsOf returns what a principal of role r may act as, as
// pki.Role.Allows says: r itself, read and the open methods, or everything
// for admin; only the open methods for an unknown role (as anonymous).
func GrantsOf(r pki.Role) rpc.Grants {
	switch b := roleBit(r); b {
	case 0, GrantOpen:
		return GrantOpen
	case GrantAdmin:
		return GrantAll
	default:
		return b | GrantRead | GrantOpen
	}
}

// MethodRequirement is MethodRole as an rpc.Auth's Require: the role's
// name and bit.
func MethodRequirement(method string) (rpc.Requirement, bool) {
	r, ok := MethodRole(method)
	if !ok {
		return rpc.Requirement{}, false
	}
	return rpc.Requirement{Role: string(r), Bit: roleBit(r)}, true
}
