package ingress

import (
	"io"
	"net/http/httptest"
	"testing"

	"github.com/gofiber/fiber/v2"

	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// A replay's own headers win over recorded ones of the same name (records
// kept before the configuration refused recording them): the provider
// always learns it got a replay, and the framing is the replay's.
func TestReplayHeadersAreTheReplaysOwn(t *testing.T) {
	app := fiber.New()
	app.Post("/", func(c *fiber.Ctx) error {
		return answer(c, &idempotency.Result{Outcome: idempotency.Replayed, Replay: &idempotency.Response{
			Status: 201,
			Headers: map[string]string{"Content-Type": "text/plain", HeaderOutcome: "forwarded",
				HeaderReplayed: "false", "Content-Length": "999"},
			Body: []byte("ok"),
		}})
	})
	resp, err := app.Test(httptest.NewRequest("POST", "/", nil))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 201 || string(body) != "ok" || resp.Header.Get("Content-Type") != "text/plain" {
		t.Fatalf("replay: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	if got := resp.Header.Get(HeaderOutcome); got != "replayed" {
		t.Errorf("%s: %q, want replayed", HeaderOutcome, got)
	}
	if got := resp.Header.Get(HeaderReplayed); got != "true" {
		t.Errorf("%s: %q, want true", HeaderReplayed, got)
	}
	if resp.ContentLength != 2 {
		t.Errorf("Content-Length %d, want 2", resp.ContentLength)
	}
}

// A replay without a status (a record holding no answer) is never sent:
// fasthttp would turn status 0 into 200 and tell the provider its event
// was taken. It is a 503 problem with Retry-After, outcome unavailable.
func TestReplayWithoutAStatusIsRefused(t *testing.T) {
	app := fiber.New()
	app.Post("/", func(c *fiber.Ctx) error {
		return answer(c, &idempotency.Result{Outcome: idempotency.Replayed, Replay: &idempotency.Response{}})
	})
	resp, err := app.Test(httptest.NewRequest("POST", "/", nil))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || resp.Header.Get(HeaderReplayed) != "" ||
		resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("replay of status 0: %d %v %s; want a 503 problem with Retry-After", resp.StatusCode, resp.Header, body)
	}
	if got := resp.Header.Values(HeaderOutcome); len(got) != 1 || got[0] != "unavailable" {
		t.Errorf("%s: %q, want unavailable", HeaderOutcome, got)
	}
}

// The upstream's answer passes on, except hookstamp's own headers: an
// upstream (or what answers in its name) cannot relabel a forward as a
// replay, or claim an outcome or an omitted body the gateway did not
// decide.
func TestUpstreamCannotSetHookstampHeaders(t *testing.T) {
	app := fiber.New()
	app.Post("/", func(c *fiber.Ctx) error {
		return answer(c, &idempotency.Result{Outcome: idempotency.Forwarded, Upstream: &idempotency.Upstream{
			Status: 200,
			Header: map[string][]string{"Content-Type": {"text/plain"}, "X-Up": {"a", "b"},
				HeaderOutcome: {"replayed"}, HeaderReplayed: {"true"}, HeaderBodyOmitted: {"true"}},
			Body: []byte("ok"),
		}})
	})
	resp, err := app.Test(httptest.NewRequest("POST", "/", nil))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(body) != "ok" || resp.Header.Get("Content-Type") != "text/plain" ||
		len(resp.Header.Values("X-Up")) != 2 {
		t.Fatalf("upstream answer: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	if got := resp.Header.Values(HeaderOutcome); len(got) != 1 || got[0] != "forwarded" {
		t.Errorf("%s: %q, want forwarded", HeaderOutcome, got)
	}
	for _, name := range []string{HeaderReplayed, HeaderBodyOmitted} {
		if got := resp.Header.Values(name); len(got) != 0 {
			t.Errorf("%s: %q from the upstream reached the provider", name, got)
		}
	}
}

// An answer passed on without its body (too large to keep) drops its
// Content-Encoding, as its record does: an empty body labelled gzip is
// not gzip, and a client that decompresses fails on it. With its body the
// encoding stays.
func TestOmittedBodyDropsItsContentEncoding(t *testing.T) {
	for _, omitted := range []bool{true, false} {
		app := fiber.New()
		app.Post("/", func(c *fiber.Ctx) error {
			up := &idempotency.Upstream{Status: 200, BodyOmitted: omitted,
				Header: map[string][]string{"Content-Type": {"application/json"}, "Content-Encoding": {"gzip"}}}
			if !omitted {
				up.Body = []byte{0x1f, 0x8b}
			}
			return answer(c, &idempotency.Result{Outcome: idempotency.Forwarded, Upstream: up})
		})
		resp, err := app.Test(httptest.NewRequest("POST", "/", nil))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := resp.Header.Get("Content-Encoding"), map[bool]string{true: "", false: "gzip"}[omitted]; got != want {
			t.Errorf("body omitted %v: Content-Encoding %q, want %q", omitted, got, want)
		}
	}
}
