package cluster

import "errors"

// ErrNoPeerAnswered is wrapped by Start's error when none of the peers to
// join through (Config.Join, then the remembered ones) answered: down,
// unreachable, or not yet started. A caller may retry Start later, as
// Consul's retry_join does (cli's --retry-max and --retry-interval); other
// errors (a refused token, a port in use) will not go away by retrying.
var ErrNoPeerAnswered = errors.New("cannot reach any peer to join")
