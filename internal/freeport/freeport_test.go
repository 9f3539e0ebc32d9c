package freeport

import (
	"net"
	"strconv"
	"testing"
)

// The ports are below the ephemeral range (where no outgoing connection
// can take them) and free: a server can bind each.
func TestPortIsBelowTheEphemeralRangeAndFree(t *testing.T) {
	lo := ephemeralLow()
	if lo == 0 {
		t.Skip("no /proc/sys/net/ipv4/ip_local_port_range: not Linux")
	}
	for range 20 {
		p, err := Port()
		if err != nil {
			t.Fatal(err)
		}
		if lo-floor >= 1000 && (p < floor || p >= lo) {
			t.Fatalf("port %d outside [%d, %d)", p, floor, lo)
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("port %d: %v", p, err)
		}
		l.Close()
	}
}
