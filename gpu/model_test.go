package gpu

import (
	"testing"

	"github.com/nodeup/nodeup/sched"
)

func TestShortModel(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"NVIDIA H100 80GB HBM3":      "H100",
		"NVIDIA H100 PCIe":           "H100",
		"NVIDIA H200":                "H200",
		"NVIDIA GH200 480GB":         "GH200",
		"NVIDIA A100-SXM4-40GB":      "A100",
		"NVIDIA A100-SXM4-80GB":      "A100",
		"NVIDIA A100 80GB PCIe":      "A100",
		"Mock NVIDIA A100-SXM4-40GB": "A100", // go-nvml's dgxa100 mock
		"Tesla V100-SXM2-16GB":       "V100",
		"Tesla V100-PCIE-32GB":       "V100",
		"Tesla T4":                   "T4",
		"Tesla K80":                  "K80",
		"Tesla P100-PCIE-16GB":       "P100",
		"NVIDIA A10G":                "A10G",
		"NVIDIA A10":                 "A10",
		"NVIDIA L4":                  "L4",
		"NVIDIA L40S":                "L40S",
		"NVIDIA RTX A6000":           "A6000",
		"NVIDIA GeForce RTX 4090":    "RTX-4090",
		"Quadro RTX 8000":            "RTX-8000",
		"":                           "",
		"NVIDIA":                     "",
		"NVIDIA Weird (name)!":       "Weird-name",
	}
	for in, want := range cases {
		got := ShortModel(in)
		if got != want {
			t.Errorf("ShortModel(%q) = %q, want %q", in, got, want)
		}
		if got != "" {
			if err := sched.ValidateResourceName(sched.AcceleratorTypeResource(got)); err != nil {
				t.Errorf("ShortModel(%q) = %q is not a valid resource name: %v", in, got, err)
			}
		}
	}
}
