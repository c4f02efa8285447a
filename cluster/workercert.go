package cluster

import (
	"context"
	"fmt"

	"github.com/nodeup/nodeup/internal/pki"
	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// workerCertEndpoints serves Worker.Certificate: a server, which holds the
// CA key, issues the certificate itself; any other node asks the leader
// (Worker.Certificate@leader). An --insecure node answers with nothing,
// so core workers stay plain there.
func (n *Node) workerCertEndpoints() {
	rpc.Handle(n.rpcServer, wire.MethodWorkerCert, func(ctx context.Context, req *wire.WorkerCertRequest) (*wire.WorkerCertReply, error) {
		if !n.secure() {
			return &wire.WorkerCertReply{}, nil
		}
		if n.sec.ca.Key != nil {
			return n.issueWorkerCert(ctx, req)
		}
		var out wire.WorkerCertReply
		if err := n.forward(ctx, wire.MethodWorkerCert, req, &out); err != nil {
			return nil, err
		}
		return &out, nil
	})
	handleAtLeader(n, wire.MethodWorkerCert, n.issueWorkerCert)
}

// issueWorkerCert makes a core worker's key and certificate for the job
// named in req (pki.IssueWorker).
func (n *Node) issueWorkerCert(_ context.Context, req *wire.WorkerCertRequest) (*wire.WorkerCertReply, error) {
	if !n.secure() {
		return nil, errInsecure("worker certificate")
	}
	if err := wire.CheckJobID(req.JobID); err != nil {
		return nil, &rpc.Error{Code: wire.CodeBadInput, Message: fmt.Sprintf("worker certificate: %v", err)}
	}
	certPEM, keyPEM, err := n.sec.ca.IssueWorker(req.JobID, pki.WorkerCertValidity)
	if err != nil {
		return nil, &rpc.Error{Code: wire.CodeInternal, Message: err.Error()}
	}
	return &wire.WorkerCertReply{CertPEM: certPEM, KeyPEM: keyPEM, CAPEM: n.sec.caPEM}, nil
}
