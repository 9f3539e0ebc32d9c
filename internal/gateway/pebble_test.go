package gateway

import (
	"crypto/x509"
	"log"
	"net"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/letsencrypt/pebble/v2/ca"
	"github.com/letsencrypt/pebble/v2/db"
	"github.com/letsencrypt/pebble/v2/va"
	"github.com/letsencrypt/pebble/v2/wfe"
	"github.com/miekg/dns"
)

// pebbleCA is Let's Encrypt's test ACME server run in the test process on
// loopback, with its own root. Its validation authority resolves every
// name to 127.0.0.1 (a DNS server of the test's own) and checks HTTP-01
// on httpPort and TLS-ALPN-01 on tlsPort: the gateway's listeners.
type pebbleCA struct {
	// DirectoryURL is the ACME directory.
	DirectoryURL string
	// ServerRoots verify Pebble's own HTTPS endpoint (gateway Options.ACMERoots).
	ServerRoots *x509.CertPool
	// IssuedRoots verify the certificates Pebble issues (the providers' view).
	IssuedRoots *x509.CertPool

	db  *db.MemoryStore
	log *pebbleLog
}

func startPebble(tb testing.TB, httpPort, tlsPort int) *pebbleCA {
	return startPebbleValidity(tb, httpPort, tlsPort, 0)
}

// startPebbleValidity is startPebble issuing certificates valid for
// validity (Pebble's default, years, when 0).
func startPebbleValidity(tb testing.TB, httpPort, tlsPort int, validity time.Duration) *pebbleCA {
	tb.Helper()
	// Read by va.New and wfe.New: validate at once, never reject a nonce.
	tb.Setenv("PEBBLE_VA_NOSLEEP", "1")
	tb.Setenv("PEBBLE_WFE_NONCEREJECT", "0")
	pl := &pebbleLog{}
	logger := log.New(pl, "pebble ", 0)
	store := db.NewMemoryStore()
	authority := ca.New(logger, store, "", "ecdsa", 0, 1, map[string]ca.Profile{"default": {Description: "default", ValidityPeriod: uint64(validity.Seconds())}})
	validator := va.New(logger, httpPort, tlsPort, false, loopbackDNS(tb), store)
	front := wfe.New(logger, store, validator, authority, []string{"pebble.letsencrypt.org"}, false, false, 0, 0)
	srv := httptest.NewUnstartedServer(front.Handler())
	srv.StartTLS()
	tb.Cleanup(srv.Close)

	p := &pebbleCA{DirectoryURL: srv.URL + wfe.DirectoryPath, ServerRoots: x509.NewCertPool(),
		IssuedRoots: x509.NewCertPool(), db: store, log: pl}
	p.ServerRoots.AddCert(srv.Certificate())
	p.IssuedRoots.AddCert(authority.GetRootCert(0).Cert)
	return p
}

var (
	issuedLine   = regexp.MustCompile(`Issued certificate serial ([0-9a-f]+) for order`)
	accountsLine = regexp.MustCompile(`There are now (\d+) accounts in memory`)
	validLine    = regexp.MustCompile(`authz \S+ set VALID by completed challenge (\S+)`)
)

// issued is the serial numbers of the certificates Pebble issued, in hex
// without leading zeros (as fmt's %x writes a big.Int).
func (p *pebbleCA) issued() []string {
	serials := p.log.matches(issuedLine)
	for i, s := range serials {
		serials[i] = strings.TrimLeft(s, "0")
	}
	return serials
}

// accounts is how many ACME accounts were registered.
func (p *pebbleCA) accounts() int { return len(p.log.matches(accountsLine)) }

// validatedBy is the type of each challenge that validated an authorization.
func (p *pebbleCA) validatedBy() []string {
	var types []string
	for _, id := range p.log.matches(validLine) {
		if c := p.db.GetChallengeByID(id); c != nil {
			types = append(types, c.Type)
		}
	}
	return types
}

// pebbleLog keeps Pebble's log lines.
type pebbleLog struct {
	mu    sync.Mutex
	lines strings.Builder
}

func (l *pebbleLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lines.Write(p)
}

func (l *pebbleLog) matches(re *regexp.Regexp) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, m := range re.FindAllStringSubmatch(l.lines.String(), -1) {
		out = append(out, m[1])
	}
	return out
}

// loopbackDNS serves DNS on a loopback port, over TCP (Pebble's client)
// and UDP, answering 127.0.0.1 to every A question and nothing to any
// other, and returns its address.
func loopbackDNS(tb testing.TB) string {
	tb.Helper()
	handler := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		for _, q := range r.Question {
			if q.Qtype == dns.TypeA {
				m.Answer = append(m.Answer, &dns.A{
					Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60},
					A:   net.IPv4(127, 0, 0, 1),
				})
			}
		}
		_ = w.WriteMsg(m)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	pc, err := net.ListenPacket("udp", ln.Addr().String())
	if err != nil {
		ln.Close()
		tb.Fatal(err)
	}
	for _, srv := range []*dns.Server{{Listener: ln, Handler: handler}, {PacketConn: pc, Handler: handler}} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		go func() { _ = srv.ActivateAndServe() }()
		<-started // a Shutdown before it would leave it serving
		tb.Cleanup(func() { _ = srv.Shutdown() })
	}
	return ln.Addr().String()
}
