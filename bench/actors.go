package bench

// reasonNoActors is why the actor metrics are skipped in this build.
const reasonNoActors = "actors not built yet (issue 4)"

// Ray's actor metrics. When actors land, this file defines their Setup
// functions (an Actor with small_value and small_value_arg methods, Ray's
// Client actor for the 1:n and n:n shapes) and drops Skip.
func init() {
	for _, m := range []struct{ name, desc string }{
		{"1_1_actor_calls_sync", "call a no-op actor method and Get the result, one at a time"},
		{"1_1_actor_calls_async", "1,000 calls to one actor, then Get them all"},
		{"1_1_actor_calls_concurrent", "1,000 calls to one actor with max_concurrency 16, then Get them all"},
		{"1_n_actor_calls_async", "one client actor calls n/2-CPU server actors 5,000 times each"},
		{"n_n_actor_calls_async", "4 tasks each make 5,000 calls spread over n/2-CPU actors"},
		{"n_n_actor_calls_with_arg_async", "n/2-CPU client actors each make 1,000 calls with a ref argument to their own server actor"},
	} {
		register(&Metric{Name: m.name, Unit: "calls/s", Group: GroupActors, Desc: m.desc, Skip: reasonNoActors})
	}
}
