package cli

import (
	"fmt"
	"net"
	"strings"

	sockaddrtmpl "github.com/hashicorp/go-sockaddr/template"
)

// resolveAddr turns --bind or --advertise (flag names which) into one IP
// address. The value may be an IP ("10.0.0.5", "::"), a network interface
// name ("eth0": its first IPv4 address, else its first IPv6 one, global
// before link-local), or a go-sockaddr template that yields one address
// (`{{ GetInterfaceIP "eth0" }}`, `{{ GetPrivateIP }}`), as Consul's and
// Nomad's bind_addr. "" stays "" (the flag's default applies). Errors name
// the flag, the value and what is accepted.
func resolveAddr(flag, value string) (string, error) {
	v := strings.TrimSpace(value)
	if v == "" {
		return "", nil
	}
	if ip := net.ParseIP(v); ip != nil {
		return ip.String(), nil
	}
	accepted := fmt.Sprintf(`want an IP address, a network interface name (this machine has: %s) or a go-sockaddr template such as '{{ GetInterfaceIP "eth0" }}'`, interfaceNames())
	if strings.Contains(v, "{{") {
		out, err := sockaddrtmpl.Parse(v)
		if err != nil {
			return "", fmt.Errorf("--%s %q: template: %v; %s", flag, value, err, accepted)
		}
		ips := strings.Fields(out)
		if len(ips) == 0 {
			return "", fmt.Errorf("--%s %q: the template gave no address (GetInterfaceIP and GetPrivateIP skip loopback and other unforwardable addresses: name the interface, as --%s lo, or filter GetAllInterfaces); %s", flag, value, flag, accepted)
		}
		if len(ips) != 1 {
			return "", fmt.Errorf("--%s %q: the template gave %d addresses (%s), want exactly one (add '| limit 1' or name the interface)", flag, value, len(ips), strings.Join(ips, " "))
		}
		ip := net.ParseIP(ips[0])
		if ip == nil {
			return "", fmt.Errorf("--%s %q: the template gave %q, which is not an IP address; %s", flag, value, ips[0], accepted)
		}
		return ip.String(), nil
	}
	ifc, err := net.InterfaceByName(v)
	if err != nil {
		return "", fmt.Errorf("--%s %q: not an IP address or an interface of this machine; %s", flag, value, accepted)
	}
	ip, err := interfaceIP(ifc)
	if err != nil {
		return "", fmt.Errorf("--%s %q: %v", flag, value, err)
	}
	return ip, nil
}

// interfaceIP picks ifc's address: IPv4 first, then global IPv6, then
// link-local IPv6 (which needs a zone, so it is last).
func interfaceIP(ifc *net.Interface) (string, error) {
	addrs, err := ifc.Addrs()
	if err != nil {
		return "", fmt.Errorf("addresses of interface %s: %w", ifc.Name, err)
	}
	var best net.IP
	rank := func(ip net.IP) int {
		switch {
		case ip.To4() != nil:
			return 3
		case !ip.IsLinkLocalUnicast():
			return 2
		default:
			return 1
		}
	}
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		if best == nil || rank(ipn.IP) > rank(best) {
			best = ipn.IP
		}
	}
	if best == nil {
		return "", fmt.Errorf("interface %s has no IP address", ifc.Name)
	}
	return best.String(), nil
}

// interfaceNames lists this machine's interfaces for error messages.
func interfaceNames() string {
	ifcs, err := net.Interfaces()
	if err != nil || len(ifcs) == 0 {
		return "none found"
	}
	names := make([]string, 0, len(ifcs))
	for _, i := range ifcs {
		names = append(names, i.Name)
	}
	return strings.Join(names, ", ")
}
