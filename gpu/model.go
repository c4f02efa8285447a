package gpu

import "strings"

// shortModels lists the accelerator models nodeup names itself, as the
// <model> in the accelerator_type:<model> resource. The names are Ray's
// (ray.util.accelerators: "V100", "A100", "H100", "A10G", "L4", ...), so a
// request written for Ray, accelerator_type="A100", means the same here.
// ShortModel matches one whole token of the product name against this list,
// so "A10" never matches "NVIDIA A100-SXM4-40GB". Keep docs/gpus.md in step.
var shortModels = []string{
	// Hopper and Blackwell
	"GB200", "GH200", "B200", "B100", "H200", "H100", "H800", "H20",
	// Ampere and Ada data-center parts
	"A100", "A800", "A40", "A30", "A10G", "A10", "A16", "A2",
	"L40S", "L40", "L20", "L4",
	// Turing, Volta, Pascal, Maxwell, Kepler
	"T4", "V100", "P100", "P40", "P4", "M60", "M40", "K80",
	// Workstation parts
	"A6000", "A5000", "A4000",
}

// vendorWords are dropped from a product name before the fallback rule.
var vendorWords = map[string]bool{"NVIDIA": true, "Tesla": true, "GeForce": true, "Quadro": true}

// ShortModel returns the short model name of an NVIDIA product name, as Ray
// names accelerator types:
//
//	"NVIDIA H100 80GB HBM3"  -> "H100"
//	"NVIDIA A100-SXM4-40GB"  -> "A100"
//	"Tesla V100-SXM2-16GB"   -> "V100"
//	"NVIDIA A10G"            -> "A10G"
//
// The name is split into tokens at spaces and '-'; the first token (in name
// order) that is in the model table wins. A name with no known token falls
// back to its tokens without vendor words (NVIDIA, Tesla, GeForce, Quadro)
// joined by '-' ("NVIDIA GeForce RTX 4090" -> "RTX-4090"), keeping only
// characters valid in a resource name. An empty or unusable name gives "".
func ShortModel(name string) string {
	tokens := strings.FieldsFunc(name, func(r rune) bool { return r == ' ' || r == '-' || r == '\t' })
	for _, t := range tokens {
		for _, m := range shortModels {
			if strings.EqualFold(t, m) {
				return m
			}
		}
	}
	var kept []string
	for _, t := range tokens {
		if !vendorWords[t] {
			if s := sanitize(t); s != "" {
				kept = append(kept, s)
			}
		}
	}
	return strings.Join(kept, "-")
}

// sanitize keeps the bytes sched.ValidateResourceName accepts.
func sanitize(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '.':
			b.WriteByte(c)
		}
	}
	return b.String()
}
