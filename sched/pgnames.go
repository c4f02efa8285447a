package sched

import (
	"strconv"
	"strings"
)

// Placement-group bundle resources, named as Ray names them. When a bundle
// of group <pg> at index <i> is committed on a node, the node takes the
// bundle's resources out of its free pool and offers them renamed:
//
//	<res>_group_<i>_<pg>   the bundle's own resources (index-specific)
//	<res>_group_<pg>       the same amounts, for work that takes any bundle
//	bundle_group_<i>_<pg>  BundleMarkerUnits of a marker, so that work with
//	bundle_group_<pg>      no resources of its own still lands in the bundle
//
// Work in a group asks for the renamed resources (PlacementGroupDemand), so
// the ordinary local scheduler, leases and spillback place it in the bundle
// and it uses the bundle's resources, not the node's free pool.
const (
	// BundleMarker is the marker resource's base name ("bundle").
	BundleMarker = "bundle"
	// groupInfix joins a resource name to the group part.
	groupInfix = "_group_"
)

// BundleMarkerUnits is how much of the marker resource a committed bundle
// offers (Ray: 1000); work in the group asks for BundleMarkerDemand of it.
var (
	BundleMarkerUnits  = QuantityOf(1000)
	BundleMarkerDemand = Quantity(10) // 0.001
)

// BundleResources returns what a committed bundle offers on its node:
// every resource of bundle under its index-specific and its wildcard name,
// plus the two markers (see the package comment above). pg is the group ID
// (hex, no underscore); index is the bundle's index.
func BundleResources(pg string, index int, bundle ResourceSet) ResourceSet {
	out := make(ResourceSet, 2*len(bundle)+2)
	idx := strconv.Itoa(index)
	for k, q := range bundle {
		out[k+groupInfix+idx+"_"+pg] = q
		out[k+groupInfix+pg] = q
	}
	out[BundleMarker+groupInfix+idx+"_"+pg] = BundleMarkerUnits
	out[BundleMarker+groupInfix+pg] = BundleMarkerUnits
	return out
}

// PlacementGroupDemand turns a task's or actor's demand into the demand on
// bundle index of group pg (index -1: any bundle of the group), as Ray's
// AddPlacementGroupConstraint: each resource under the group's wildcard
// name, and for a given index also under the bundle's own name, plus
// BundleMarkerDemand of the marker(s), so a demand of nothing still needs
// the bundle. Asking for the wildcard too keeps work pinned to one bundle
// from over-committing the group against work that takes any bundle. The
// result is a new set.
func PlacementGroupDemand(pg string, index int, demand ResourceSet) ResourceSet {
	wildcard := groupInfix + pg
	indexed := ""
	if index >= 0 {
		indexed = groupInfix + strconv.Itoa(index) + "_" + pg
	}
	out := make(ResourceSet, 2*len(demand)+2)
	for k, q := range demand {
		if q > 0 {
			out[k+wildcard] = q
			if indexed != "" {
				out[k+indexed] = q
			}
		}
	}
	out[BundleMarker+wildcard] = BundleMarkerDemand
	if indexed != "" {
		out[BundleMarker+indexed] = BundleMarkerDemand
	}
	return out
}

// PlacementGroupOf returns the group and bundle index (-1: any) a
// placement-group demand names through its marker resources (the indexed
// marker wins over the wildcard one), or ok=false when demand is not a
// placement-group demand.
func PlacementGroupOf(demand ResourceSet) (pg string, index int, ok bool) {
	index = -1
	for k := range demand {
		rest, found := strings.CutPrefix(k, BundleMarker+groupInfix)
		if !found {
			continue
		}
		if i := strings.IndexByte(rest, '_'); i > 0 {
			if n, err := strconv.Atoi(rest[:i]); err == nil && n >= 0 {
				return rest[i+1:], n, true
			}
		}
		pg, ok = rest, true
	}
	return pg, index, ok
}

// BaseDemand returns the demand a placement-group demand of group pg was
// made from (the inverse of PlacementGroupDemand): each resource under the
// group's wildcard name, renamed back ("GPU_group_<pg>" → "GPU"); the
// markers and the index-specific names are left out. The result is a new
// set, empty for a demand of nothing but markers.
func BaseDemand(pg string, demand ResourceSet) ResourceSet {
	suffix := groupInfix + pg
	out := ResourceSet{}
	for k, q := range demand {
		// An index-specific name ends in "_<index>_<pg>", never in suffix.
		if base, ok := strings.CutSuffix(k, suffix); ok && base != BundleMarker {
			out[base] = q
		}
	}
	return out
}
