//go:build !race

package cluster

// skipUnderRace does nothing without the race detector.
func skipUnderRace(t interface{ Skip(...any) }) {}
