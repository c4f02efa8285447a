package wire

// ProtocolVersion is the version of this protocol: the messages of this
// package, their field names and the meaning of the codes. Every
// connection exchanges it in its hello (rpc.HelloSize) and a peer with
// another is refused with an error naming both (rpc.VersionError), so
// nodes, drivers and workers of different versions never misread each
// other's messages. Adding a field does not change it (readers ignore
// unknown keys); renaming or removing one, or changing a meaning, does.
//
//	1: no hello (before issue 14)
//	2: the hello; JobRegisterReply.ClusterName (was ClusterNam), without
//	   InlineMax; the enumerated codes of codes.go
//	3: one shape for infeasible, *Infeasible (was a string in LeaseReply
//	   and ActorStartReply, a bool in ActorInfo and PGInfo);
//	   a client's hello may carry a token ("NT", rpc.AppendHelloToken);
//	   permission_denied is sent (MethodRoles)
const ProtocolVersion uint16 = 3

// PreambleRPC is the byte a client sends first on a node's port to speak
// RPC (the port also carries Raft, 0x02); a core worker's port expects it
// too. The hello follows it.
const PreambleRPC byte = 0x01
