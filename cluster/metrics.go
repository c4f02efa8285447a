package cluster

import (
	"strconv"
	"strings"
	"sync"
	"time"

	gometrics "github.com/hashicorp/go-metrics/compat"
	gometricsprom "github.com/hashicorp/go-metrics/compat/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/nodeup/nodeup/gpu"
	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/store"
	"github.com/nodeup/nodeup/wire"
)

// metricsRegistry is what /metrics serves: the node's own collectors (read
// at scrape time from state the node keeps anyway, so no hot path does
// extra bookkeeping), Go's and the process's, and the go-metrics sink Raft
// and memberlist emit through.
func (n *Node) metricsRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(&nodeCollector{n: n}, &rayCollector{n: n},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if sink := goMetricsSink(n); sink != nil {
		reg.MustRegister(sink)
	}
	n.rpcMetricsOf().register(reg)
	return reg
}

var (
	sinkOnce sync.Once
	sink     *gometricsprom.PrometheusSink
)

// goMetricsSink installs, once per process, a Prometheus sink as go-metrics'
// global sink, which hashicorp/raft and memberlist write to (through
// go-metrics/compat: armon/go-metrics unless built with the
// hashicorpmetrics tag), so their series appear as nodeup_raft_* and
// nodeup_memberlist_*, as Nomad's nomad_raft_*. Several nodes in one
// process (tests) share it. Nil if it could not be made.
func goMetricsSink(n *Node) *gometricsprom.PrometheusSink {
	sinkOnce.Do(func() {
		s, err := gometricsprom.NewPrometheusSinkFrom(gometricsprom.PrometheusOpts{
			Name: "nodeup_go_metrics_sink",
			// Never expire: Raft's counters (nodeup_raft_state_leader)
			// change rarely and must not vanish between changes. A
			// departed peer's few replication series stay until restart;
			// servers are few, so the count stays bounded.
			Expiration: 0,
			// Registered here by each node; this registry only satisfies
			// the constructor, which registers the sink somewhere.
			Registerer: prometheus.NewRegistry(),
		})
		if err != nil {
			n.logger.Warn("no Raft or memberlist metrics: go-metrics Prometheus sink", "err", err)
			return
		}
		cfg := gometrics.DefaultConfig("nodeup")
		cfg.EnableHostname = false
		cfg.EnableHostnameLabel = false
		cfg.EnableRuntimeMetrics = false // the Go collector has them
		if _, err := gometrics.NewGlobal(cfg, s); err != nil {
			n.logger.Warn("no Raft or memberlist metrics: go-metrics global sink", "err", err)
			return
		}
		sink = s
	})
	return sink
}

// rayCollector exports nodeup's state under Ray's metric names where Ray
// has one (Ray's metric_defs), with bounded labels: states, resource names
// (bundle and node:<id> resources left out), object locations. Gauges of
// the replicated state (actors, placement groups, autopilot) come from the
// leader only, so sum() over nodes counts each once; the rest describe
// this node.
type rayCollector struct{ n *Node }

var (
	descTasks = prometheus.NewDesc("ray_tasks",
		"Tasks on this node by state, as Ray's ray_tasks: RUNNING holds a worker lease here, PENDING_NODE_ASSIGNMENT waits here for resources.",
		[]string{"State"}, nil)
	descActors = prometheus.NewDesc("ray_actors",
		"Actors in the cluster by state (PENDING, ALIVE, RESTARTING, DEAD), as Ray's ray_actors; leader only.",
		[]string{"State"}, nil)
	descPGs = prometheus.NewDesc("ray_placement_groups",
		"Placement groups in the cluster by state (PENDING, CREATED, RESCHEDULING, REMOVED), as Ray's ray_placement_groups; leader only.",
		[]string{"State"}, nil)
	descResources = prometheus.NewDesc("ray_resources",
		"This node's logical resources by name and state (USED, AVAILABLE, TOTAL), in resource units (bytes for memory), as Ray's ray_resources.",
		[]string{"Name", "State"}, nil)
	descObjMem = prometheus.NewDesc("ray_object_store_memory",
		"Bytes of objects in this node's object store by location: MMAP_SHM in shared memory, SPILLED on disk; as Ray's ray_object_store_memory.",
		[]string{"Location"}, nil)
	descObjAvail = prometheus.NewDesc("ray_object_store_available_memory",
		"Free bytes in this node's object store (possibly fragmented), as Ray's ray_object_store_available_memory.", nil, nil)
	descObjPinned = prometheus.NewDesc("nodeup_object_store_pinned_bytes",
		"Bytes of objects in this node's object store that a reader pins (never spilled or evicted meanwhile).", nil, nil)
	descObjects = prometheus.NewDesc("nodeup_object_store_objects",
		"Objects in this node's object store, by location (MMAP_SHM, SPILLED).", []string{"Location"}, nil)
	descWorkers = prometheus.NewDesc("nodeup_worker_processes",
		"Worker processes this node runs, by kind: task (pooled) or actor (dedicated).", []string{"Kind"}, nil)
	descDemand = prometheus.NewDesc("nodeup_pending_demands",
		"Resource demands this node holds back, by reason: waiting (queued here for resources) or infeasible (no node can satisfy them, seen in the last 15 s).",
		[]string{"Reason"}, nil)
	descGrants = prometheus.NewDesc("nodeup_lease_grants_total",
		"Worker leases this node granted since start (a task's or an actor's resources reserved here).", nil, nil)
	descSpillbacks = prometheus.NewDesc("nodeup_spillbacks_total",
		"Lease requests this node sent on to another node with room since start (Ray's spillback).", nil, nil)
	descGPUHealthy = prometheus.NewDesc("nodeup_gpu_healthy",
		"1 while this node's GPU is healthy (0 once lost or broken, e.g. an Xid; it is then out of scheduling).", []string{"GpuIndex", "GpuDeviceName"}, nil)
	descGPUReserved = prometheus.NewDesc("nodeup_gpu_reserved",
		"Fraction of this node's GPU that live leases reserve (0..1).", []string{"GpuIndex", "GpuDeviceName"}, nil)
	descGPUUtil = prometheus.NewDesc("ray_node_gpus_utilization",
		"Percent of the last sample period a kernel ran on this node's GPU (NVML), as Ray's ray_node_gpus_utilization; absent until sampled or when unknown.",
		[]string{"GpuIndex", "GpuDeviceName"}, nil)
	descGPUMemUsed = prometheus.NewDesc("nodeup_gpu_memory_used_bytes",
		"Framebuffer bytes in use on this node's GPU (NVML); absent until sampled or when unknown.", []string{"GpuIndex", "GpuDeviceName"}, nil)
	descGPUMemTotal = prometheus.NewDesc("nodeup_gpu_memory_total_bytes",
		"Framebuffer bytes of this node's GPU; absent when unknown.", []string{"GpuIndex", "GpuDeviceName"}, nil)
	descPilotHealthy = prometheus.NewDesc("nodeup_autopilot_healthy",
		"1 if autopilot counts every Raft server healthy, as Consul's autopilot_healthy; leader only.", nil, nil)
	descPilotTolerance = prometheus.NewDesc("nodeup_autopilot_failure_tolerance",
		"Voters that may fail with the cluster keeping quorum, as Consul's autopilot_failure_tolerance; leader only.", nil, nil)
)

// Describe implements prometheus.Collector.
func (c *rayCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descTasks, descActors, descPGs, descResources, descObjMem, descObjAvail, descObjPinned,
		descObjects, descWorkers, descDemand, descGrants, descSpillbacks, descGPUHealthy, descGPUReserved, descGPUUtil, descGPUMemUsed,
		descGPUMemTotal, descPilotHealthy, descPilotTolerance} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *rayCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.n
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}

	if n.local != nil {
		m := n.local.metrics()
		actorWorkers := map[string]bool{}
		tasks, actors := 0, 0
		if n.workers != nil {
			tasks, actors = n.workers.counts(actorWorkers)
		}
		running := 0
		for _, w := range m.leaseWorkers {
			if !actorWorkers[w] {
				running++
			}
		}
		gauge(descTasks, float64(running), "RUNNING")
		gauge(descTasks, float64(m.queued), "PENDING_NODE_ASSIGNMENT")
		gauge(descDemand, float64(m.queued), "waiting")
		gauge(descDemand, float64(m.infeasible), "infeasible")
		counter(descGrants, float64(m.grants))
		gauge(descWorkers, float64(tasks), "task")
		gauge(descWorkers, float64(actors), "actor")
		// Totals as the node registers them: the local scheduler's stay
		// as they were at start when a GPU breaks (its free pool shrinks).
		for name, total := range n.Resources() {
			// node:<id> is one per node; a bundle's resources
			// (sched.BundleResources, "_group_") one set per group.
			if strings.HasPrefix(name, sched.NodeResourcePrefix) || strings.Contains(name, "_group_") {
				continue
			}
			avail := m.avail[name]
			gauge(descResources, total.Float(), name, "TOTAL")
			gauge(descResources, avail.Float(), name, "AVAILABLE")
			gauge(descResources, (total - avail).Float(), name, "USED")
		}
	}
	counter(descSpillbacks, float64(n.spills.total.Load()))

	if s := n.objects.Store(); s != nil {
		st := s.Stats()
		gauge(descObjMem, float64(st.Used), "MMAP_SHM")
		gauge(descObjAvail, float64(st.Capacity-st.Used))
		gauge(descObjPinned, float64(st.Pinned))
		gauge(descObjects, float64(st.Objects), "MMAP_SHM")
		spilledObjs, spilled := n.objects.SpillStats()
		gauge(descObjMem, float64(spilled), "SPILLED")
		gauge(descObjects, float64(spilledObjs), "SPILLED")
	}

	for _, d := range n.GPUStatus().Devices {
		idx, name := strconv.Itoa(d.Index), d.Name
		healthy := 0.0
		if d.Healthy {
			healthy = 1
		}
		gauge(descGPUHealthy, healthy, idx, name)
		gauge(descGPUReserved, d.GPU.Float(), idx, name)
		total := d.Device.MemoryBytes // d.MemoryBytes is what leases reserve
		if s := d.Sample; s != nil {
			if s.UtilizationPercent != gpu.Unknown {
				gauge(descGPUUtil, float64(s.UtilizationPercent), idx, name)
			}
			if s.MemoryUsedBytes != gpu.Unknown {
				gauge(descGPUMemUsed, float64(s.MemoryUsedBytes), idx, name)
			}
			if s.MemoryTotalBytes > 0 {
				total = s.MemoryTotalBytes
			}
		}
		if total > 0 {
			gauge(descGPUMemTotal, float64(total), idx, name)
		}
	}

	if !n.IsLeader() {
		return
	}
	st := n.State()
	if all, err := st.Actors(); err == nil {
		counts := map[wire.ActorState]int{store.ActorPending: 0, store.ActorAlive: 0, store.ActorRestarting: 0, store.ActorDead: 0}
		for _, a := range all {
			counts[a.State]++
		}
		for s, v := range counts {
			gauge(descActors, float64(v), string(s))
		}
	}
	if all, err := st.PlacementGroups(); err == nil {
		counts := map[wire.PlacementGroupState]int{store.PGPending: 0, store.PGCreated: 0, store.PGRescheduling: 0, store.PGRemoved: 0}
		for _, g := range all {
			counts[g.State]++
		}
		for s, v := range counts {
			gauge(descPGs, float64(v), string(s))
		}
	}
	if n.pilot != nil {
		if ps := n.pilot.GetState(); ps != nil {
			healthy := 0.0
			if ps.Healthy {
				healthy = 1
			}
			gauge(descPilotHealthy, healthy)
			gauge(descPilotTolerance, float64(ps.FailureTolerance))
		}
	}
}

// schedMetrics is what the local scheduler reports to /metrics.
type schedMetrics struct {
	avail        sched.ResourceSet
	leaseWorkers []string // the worker of each lease held ("" until set)
	queued       int      // lease requests waiting for resources here
	infeasible   int      // demands no node can satisfy, seen recently
	grants       uint64   // leases granted since start
}

func (s *localSched) metrics() schedMetrics {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := schedMetrics{avail: s.avail.Clone(), queued: len(s.queue), grants: s.nextID}
	m.leaseWorkers = make([]string, 0, len(s.leases))
	for _, l := range s.leases {
		m.leaseWorkers = append(m.leaseWorkers, l.workerID)
	}
	now := time.Now()
	for _, p := range s.pending {
		if now.Sub(p.seen) <= 15*time.Second {
			m.infeasible++
		}
	}
	return m
}

// counts returns the pool's task and actor worker processes, and adds each
// actor worker's ID to actorIDs.
func (p *workerPool) counts(actorIDs map[string]bool) (tasks, actors int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, w := range p.byID {
		if w.actor != "" {
			actorIDs[id] = true
			actors++
		} else {
			tasks++
		}
	}
	return tasks, actors
}
