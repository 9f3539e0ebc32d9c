// Package freeport picks loopback TCP ports for servers that another
// process binds later (a gateway, a redis-server started by a test or by
// the chaos harness), and binds again after each restart.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// floor is the lowest port Port picks: above the well-known ports and the
// usual fixed ones (PostgreSQL 5432, Redis 6379).
const floor = 10000

// Port returns a loopback TCP port that is free now. It is picked below
// the kernel's ephemeral range (net.ipv4.ip_local_port_range) when there is
// room: the kernel hands ports of that range to every outgoing connection
// and to every listener on port 0, so a port of it found free here can be
// taken by any of them before the server binds it, or between two lives of
// a restarted server (CI saw a chaos gateway fail to start: "bind: address
// already in use"). A port below the range is taken only by an explicit
// bind.
func Port() (int, error) {
	if lo := ephemeralLow(); lo-floor >= 1000 {
		for range 200 {
			p := floor + rand.IntN(lo-floor)
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
			if err == nil {
				l.Close()
				return p, nil
			}
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("freeport: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ephemeralLow is the first port of the ephemeral range, or 0 when it
// cannot be read (not Linux).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil {
		return 0
	}
	return lo
}
