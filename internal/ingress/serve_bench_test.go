package ingress_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"github.com/hookstamp/hookstamp/internal/config"
	"github.com/hookstamp/hookstamp/internal/extract"
	"github.com/hookstamp/hookstamp/internal/forward"
	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/memscreen"
	"github.com/hookstamp/hookstamp/internal/ingress"
	"github.com/hookstamp/hookstamp/internal/telemetry"
	"github.com/hookstamp/hookstamp/internal/verify"
)

// noLedger is a ledger a repeat answered from the local cache never
// reaches; any call fails the benchmark.
type noLedger struct{ tb testing.TB }

func (l noLedger) Lookup(context.Context, idempotency.Ref) (*idempotency.Record, error) {
	l.tb.Error("ledger lookup on a cached repeat")
	return nil, idempotency.ErrNotFound
}

func (l noLedger) Claim(context.Context, idempotency.ClaimRequest, time.Time) (idempotency.Claim, error) {
	l.tb.Error("ledger claim on a cached repeat")
	return idempotency.Claim{}, idempotency.ErrUnavailable
}

func (l noLedger) Commit(context.Context, *idempotency.Record, string, time.Time) error {
	l.tb.Error("ledger commit on a cached repeat")
	return idempotency.ErrUnavailable
}

func (l noLedger) Release(context.Context, idempotency.Ref, string) error { return nil }

type noForward struct{ tb testing.TB }

func (f noForward) Do(context.Context, *forward.Request) (*forward.Response, error) {
	f.tb.Error("forward of a cached repeat")
	return nil, forward.ErrUnreachable
}

// BenchmarkServeCachedRepeat is a repeat answered from the in-process
// cache, through everything that runs in the gateway process between the
// request's bytes and the answer's: Fiber, the server-span middleware with
// hookstamp's default telemetry (exporter none), route matching, key
// extraction (header), fingerprint (body), the cache, the metrics, and the
// replay. No network call is made: the screen, ledger and forwarder fail
// the benchmark if reached.
func BenchmarkServeCachedRepeat(b *testing.B) {
	tel, err := telemetry.Setup(context.Background(), config.Default().Telemetry, "bench", nil)
	if err != nil {
		b.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	ex, err := extract.NewExtractor("hooks", []extract.Source{{Kind: "header", Arg: "X-Event-Id"}}, 255)
	if err != nil {
		b.Fatal(err)
	}
	fp, err := extract.NewFingerprinter(extract.FingerprintBody, nil)
	if err != nil {
		b.Fatal(err)
	}
	screen := memscreen.New(memscreen.Options{MaxCachedBody: 64 << 10})
	defer screen.Close()
	cache := idempotency.NewCache(32<<20, 64<<10, 0)
	eng, err := idempotency.New(idempotency.Options{Screen: screen, Ledger: noLedger{b}, Cache: cache, Tracer: tel.Tracer()})
	if err != nil {
		b.Fatal(err)
	}
	route := &ingress.Route{Name: "hooks", Path: "/hooks", Methods: []string{"POST"}, Extractor: ex, Fingerprinter: fp,
		KeyRequired: true, Policy: &idempotency.Policy{Route: "hooks", Final: idempotency.DefaultFinal, MaxBody: 1 << 20, Retention: time.Hour}}
	srv := ingress.New(ingress.Options{Routes: []*ingress.Route{route}, Engine: eng, Forwarder: noForward{b},
		BodyLimit: 1 << 20, Observer: tel})
	h := srv.App().Handler()

	const key = "evt_1NG8Du2eZvKYlo2CUI79vXWy"
	body := []byte(`{"id":"evt_1NG8Du2eZvKYlo2CUI79vXWy","object":"event","type":"payment_intent.succeeded","data":{"object":{"amount":2000}}}`)
	// Read from the wire, as the framing checks judge the fields received.
	var req fasthttp.Request
	raw := fmt.Sprintf("POST /hooks HTTP/1.1\r\nHost: gateway.test\r\nX-Event-Id: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", key, len(body), body)
	if err := req.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
		b.Fatal(err)
	}
	var rc fasthttp.RequestCtx
	rc.Init(&req, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}, nil)

	// The first delivery's record, as the gateway caches it after commit.
	var r fasthttp.Request
	req.CopyTo(&r)
	cache.Put(idempotency.Ref{Route: "hooks", Key: key}, &idempotency.Entry{BodyCached: true,
		Fingerprint: fp.Fingerprint(requestView{&r}), Response: idempotency.Response{Status: 200,
			Headers: map[string]string{"Content-Type": "application/json"}, Body: []byte(`{"received":true}`)}}, cache.Ticket())

	b.ReportAllocs()
	for b.Loop() {
		rc.Response.Reset()
		rc.ResetUserValues() // as fasthttp does between requests
		h(&rc)
		if rc.Response.StatusCode() != 200 {
			b.Fatalf("status %d: %s", rc.Response.StatusCode(), rc.Response.Body())
		}
	}
	if got := string(rc.Response.Header.Peek(ingress.HeaderOutcome)); got != "replayed" {
		b.Fatalf("outcome %q, want replayed", got)
	}
}

// requestView is the fasthttp request as extract reads it.
type requestView struct{ r *fasthttp.Request }

func (v requestView) Header(name string) []byte { return v.r.Header.Peek(name) }
func (v requestView) HeaderValues(name string) [][]byte {
	return v.r.Header.PeekAll(name)
}
func (v requestView) HeaderCount(name string) int { return len(v.r.Header.PeekAll(name)) }
func (v requestView) Query(name string) []byte    { return v.r.URI().QueryArgs().Peek(name) }
func (v requestView) QueryCount(name string) int {
	return len(v.r.URI().QueryArgs().PeekMulti(name))
}
func (v requestView) QueryValues(name string) [][]byte {
	return v.r.URI().QueryArgs().PeekMulti(name)
}
func (v requestView) Body() []byte        { return v.r.Body() }
func (v requestView) ContentType() []byte { return v.r.Header.ContentType() }
func (v requestView) Method() []byte      { return v.r.Header.Method() }

// forged refuses every signature.
type forged struct{}

func (forged) Verify(verify.Request) error { return errors.New("signature mismatch") }

// keyObserver keeps the key of the last request observed.
type keyObserver struct{ key string }

func (o *keyObserver) Around(c *fiber.Ctx, serve func(*fiber.Ctx) error) error { return serve(c) }
func (o *keyObserver) Observe(_ context.Context, ev *ingress.Event)            { o.key = ev.Key }
func (o *keyObserver) ObserveUpstream(context.Context, string, time.Duration)  {}

// BenchmarkServeForgedSignature is a 1 MiB JSON body with a forged
// signature, flat or nested 998 deep under the key's member: refused
// 401, its key is still read for the log line, and that must cost no more
// for the nested body, which anyone can send, than for the flat one.
func BenchmarkServeForgedSignature(b *testing.B) {
	ex, err := extract.NewExtractor("hooks", []extract.Source{{Kind: "json", Arg: "id"}, {Kind: "header", Arg: "X-Event-Id"}}, 255)
	if err != nil {
		b.Fatal(err)
	}
	screen := memscreen.New(memscreen.Options{})
	defer screen.Close()
	eng, err := idempotency.New(idempotency.Options{Screen: screen, Ledger: noLedger{b}})
	if err != nil {
		b.Fatal(err)
	}
	route := &ingress.Route{Name: "hooks", Path: "/hooks", Methods: []string{"POST"}, Extractor: ex, Verifier: forged{},
		KeyRequired: true, Policy: &idempotency.Policy{Route: "hooks", Final: idempotency.DefaultFinal, MaxBody: 2 << 20, Retention: time.Hour}}
	obs := &keyObserver{}
	h := ingress.New(ingress.Options{Routes: []*ingress.Route{route}, Engine: eng, Forwarder: noForward{b},
		BodyLimit: 2 << 20, Observer: obs}).App().Handler()
	for _, shape := range []struct {
		name  string
		depth int
	}{{"flat", 1}, {"deep", 998}} {
		b.Run(shape.name, func(b *testing.B) {
			const size = 1 << 20
			n := (size - 2*shape.depth - 16) / 2
			body := `{"id":` + strings.Repeat("[", shape.depth) + strings.Repeat("1,", n) + "1" + strings.Repeat("]", shape.depth) + `}`
			var req fasthttp.Request
			raw := fmt.Sprintf("POST /hooks HTTP/1.1\r\nHost: gateway.test\r\nX-Event-Id: evt_1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			if err := req.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
				b.Fatal(err)
			}
			var rc fasthttp.RequestCtx
			rc.Init(&req, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}, nil)
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				rc.Response.Reset()
				rc.ResetUserValues()
				h(&rc)
			}
			if rc.Response.StatusCode() != 401 || obs.key != "evt_1" {
				b.Fatalf("status %d, key %q; want 401 and the key evt_1 read for the log", rc.Response.StatusCode(), obs.key)
			}
		})
	}
}
