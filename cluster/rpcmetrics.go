package cluster

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// rpcMetrics are the latency and errors of the RPCs this node serves, per
// method (as Nomad's nomad.rpc.* and Ray's gRPC server metrics): bounded,
// since only registered methods are observed.
type rpcMetrics struct {
	duration *prometheus.HistogramVec
	errors   *prometheus.CounterVec
}

// rpcMetricsOf makes n's RPC metrics once and has its RPC server feed them.
func (n *Node) rpcMetricsOf() *rpcMetrics {
	n.rpcMetricsOnce.Do(func() {
		m := &rpcMetrics{
			duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
				Name:    "nodeup_rpc_server_duration_seconds",
				Help:    "Time this node's handlers took per RPC method, in seconds (the answer's writing not included).",
				Buckets: prometheus.ExponentialBuckets(50e-6, 4, 10), // 50 µs to 13 s
			}, []string{"method"}),
			errors: prometheus.NewCounterVec(prometheus.CounterOpts{
				Name: "nodeup_rpc_server_errors_total",
				Help: "RPCs this node answered with an error, per method and error code.",
			}, []string{"method", "code"}),
		}
		if n.rpcServer != nil {
			n.rpcServer.SetObserver(func(method string, took time.Duration, code string) {
				m.duration.WithLabelValues(method).Observe(took.Seconds())
				if code != "" {
					m.errors.WithLabelValues(method, code).Inc()
				}
			})
		}
		n.rpcMetrics = m
	})
	return n.rpcMetrics
}

// register adds m's series to reg.
func (m *rpcMetrics) register(reg *prometheus.Registry) {
	reg.MustRegister(m.duration, m.errors)
}
