package cluster

import (
	"net"
	"strconv"
	"strings"
)

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func splitHostPortInt(addr string) (string, int) {
	h, p, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(p)
	return h, n
}
