package worker

import (
	"testing"

	"github.com/nodeup/nodeup/cluster"
)

// TestCoreWorkersTalkTLS: on a secure cluster core workers dial each other
// over TLS. A task on another node reads an object the driver owns (the
// worker asks the driver, its owner) and returns a ref the driver reads
// back: every connection the driver's port accepts is TLS, none plain,
// and the driver's certificate is the cluster CA's worker certificate.
//
// n1 serves on 127.0.0.2 (Linux routes all of 127/8 to loopback): core
// workers on the same IP, which are on the same machine, talk plainly.
func TestCoreWorkersTalkTLS(t *testing.T) {
	startClusterInit(t, 2, func(i int, cfg *cluster.Config) {
		if i == 1 {
			cfg.BindAddr = "127.0.0.2"
		}
	})
	ctx := ctxT(t)
	cw, err := current()
	if err != nil {
		t.Fatal(err)
	}
	if cw.tls == nil {
		t.Fatal("the driver of a secure cluster has no worker certificate")
	}
	if leaf := cw.tls.cred.Load().Cert.Leaf; leaf.Subject.CommonName != "job "+cw.jobID || leaf.DNSNames[0] != "worker.nodeup" {
		t.Fatalf("the driver's certificate: subject %q, names %v", leaf.Subject.CommonName, leaf.DNSNames)
	}
	p, err := Put(ctx, 41)
	if err != nil {
		t.Fatal(err)
	}
	// A ref inside the argument: the worker gets its value from its owner.
	got, err := Must(sumRef.Options(Resources(map[string]float64{"node1": 1}))).Remote(ctx, []Ref[int]{p}).Get(ctx)
	if err != nil || got != 41 {
		t.Fatalf("task on n1 over the driver's object: %d, %v", got, err)
	}
	if n, m := cw.tls.tlsAccepts.Load(), cw.tls.plainAccepts.Load(); n == 0 || m != 0 {
		t.Fatalf("the driver's port accepted %d TLS and %d plain connections; want only TLS", n, m)
	}
}
