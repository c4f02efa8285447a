package wire

// MethodWorkerCert: core worker → its node at start (over the Unix socket,
// or TCP with a token of role submit), forwarded to the leader, which holds
// the cluster CA's key. WorkerCertRequest → WorkerCertReply. On a secure
// cluster the reply holds a fresh key and certificate (pki.IssueWorker)
// with which the process serves TLS to other core workers, and the CA
// certificate the core workers it dials must chain to; on an --insecure
// cluster it is empty and core workers talk plainly.
const MethodWorkerCert = "Worker.Certificate"

// WorkerCertRequest names the job of the process asking (CheckJobID).
type WorkerCertRequest struct {
	JobID string
}

// WorkerCertReply is a core worker's TLS credential, all PEM; empty on an
// insecure cluster.
type WorkerCertReply struct {
	CertPEM []byte
	KeyPEM  []byte
	CAPEM   []byte
}
