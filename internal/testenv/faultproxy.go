package testenv

import (
	"net/url"
	"testing"

	"github.com/hookstamp/hookstamp/internal/faultproxy"
)

// FaultProxy is a faultproxy.Proxy between the code under test and one of
// its dependencies, closed when the test ends: Cut (the dependency is
// down), Hang (it accepts and never answers: only timeouts help), Restore.
type FaultProxy struct {
	*faultproxy.Proxy
	// Addr is the proxy's loopback address; point the client at it.
	Addr string
}

// StartFaultProxy starts a proxy to target (host:port).
func StartFaultProxy(tb testing.TB, target string) *FaultProxy {
	tb.Helper()
	p, err := faultproxy.New("test", target)
	if err != nil {
		tb.Fatalf("testenv: fault proxy: %v", err)
	}
	tb.Cleanup(func() { _ = p.Close() })
	return &FaultProxy{Proxy: p, Addr: p.Addr()}
}

// Hang keeps connections open but moves no byte (faultproxy.Blackhole).
func (p *FaultProxy) Hang() { p.Blackhole() }

// Restore proxies new connections again and resets those that were hung,
// as a peer that gave up on them would: bytes a client abandoned (a claim
// it timed out on) never reach the dependency late.
func (p *FaultProxy) Restore() {
	p.Proxy.Cut()
	p.Proxy.Restore()
}

// PostgresBehindProxy is Postgres (a schema of the test's own) reached
// through a fault proxy: the DSN to open, and the proxy to cut.
func PostgresBehindProxy(tb testing.TB) (dsn string, p *FaultProxy) {
	tb.Helper()
	u, err := url.Parse(Postgres(tb))
	if err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	p = StartFaultProxy(tb, u.Host)
	u.Host = p.Addr
	return u.String(), p
}
