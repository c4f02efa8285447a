package cluster

import (
	"net"
	"strconv"
)

func splitHostPortInt(addr string) (string, int) {
	h, p, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(p)
	return h, n
}
