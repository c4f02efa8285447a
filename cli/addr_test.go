package cli

import (
	"strings"
	"testing"
)

func TestBindAcceptsInterfaceNamesAndTemplates(t *testing.T) {
	loIPv4 := `{{ GetAllInterfaces | include "name" "^lo$" | include "type" "IPv4" | attr "address" }}`
	cfg, _, err := parseStart(t, "--data-dir", t.TempDir(), "--bind", "lo", "--advertise", loIPv4)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.BindAddr != "127.0.0.1" || cfg.AdvertiseAddr != "127.0.0.1" {
		t.Fatalf("--bind lo --advertise <lo's IPv4 template>: got bind %q advertise %q, want 127.0.0.1 for both", cfg.BindAddr, cfg.AdvertiseAddr)
	}
	good := map[string]string{"10.1.2.3": "10.1.2.3", " 127.0.0.1 ": "127.0.0.1", "::": "::", "lo": "127.0.0.1",
		`{{ GetAllInterfaces | include "name" "^lo$" | sort "type" | limit 1 | attr "address" }}`: "127.0.0.1", "": ""}
	for in, want := range good {
		if got, err := resolveAddr("bind", in); err != nil || got != want {
			t.Errorf("resolveAddr(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

func TestBindErrorsNameValueAndWhatIsAccepted(t *testing.T) {
	cases := map[string][]string{
		"nosuch0":                        {`--bind "nosuch0"`, "not an IP address or an interface", "lo", "go-sockaddr template"},
		"10.0.0.300":                     {`"10.0.0.300"`, "interface name"},
		`{{ GetInterfaceIP "nosuch0" }}`: {`GetInterfaceIP`, "template"},
		`{{ GetInterfaceIP "lo" }}`:      {"gave no address", "skip loopback", "--bind lo"},
		`{{ "text" }}`:                   {`gave "text", which is not an IP address`},
		`{{ "10.0.0.1 10.0.0.2" }}`:      {"gave 2 addresses (10.0.0.1 10.0.0.2), want exactly one"},
		`{{ GetInterfaceIP "lo" `:        {"template"},
	}
	for in, wants := range cases {
		_, err := resolveAddr("bind", in)
		if err == nil {
			t.Errorf("resolveAddr(%q): no error", in)
			continue
		}
		for _, w := range wants {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("resolveAddr(%q): error %q does not contain %q", in, err, w)
			}
		}
	}
	if _, _, err := parseStart(t, "--data-dir", t.TempDir(), "--advertise", "nosuch0"); err == nil || !strings.Contains(err.Error(), `--advertise "nosuch0"`) {
		t.Errorf("start --advertise nosuch0: got %v", err)
	}
}
