package sched

import (
	"encoding/json"
	"fmt"
)

// MarshalJSON writes the set as a JSON object of resource units as numbers
// ({"CPU": 2, "memory": 1073741824}), the shape of Ray's
// ray.cluster_resources(), never the internal fixed-point integers.
func (r ResourceSet) MarshalJSON() ([]byte, error) {
	return json.Marshal(r.Floats())
}

// UnmarshalJSON reads the object MarshalJSON writes, with ParseResources'
// exactness and validation (names, at most 4 decimals, no negatives).
func (r *ResourceSet) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*r = nil
		return nil
	}
	set, err := parseResourcesJSON(string(b))
	if err != nil {
		return fmt.Errorf("resource set: %w", err)
	}
	*r = set
	return nil
}
