package ingress

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// recorder is an Observer that counts what it is told.
type recorder struct {
	mu       sync.Mutex
	arounds  int
	outcomes []idempotency.Outcome
	forwards []string
}

func (r *recorder) Around(c *fiber.Ctx, serve func(*fiber.Ctx) error) error {
	r.mu.Lock()
	r.arounds++
	r.mu.Unlock()
	if err := serve(c); err != nil {
		return c.App().Config().ErrorHandler(c, err)
	}
	return nil
}

func (r *recorder) Observe(_ context.Context, ev *Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.outcomes = append(r.outcomes, ev.Result.Outcome)
}

func (r *recorder) ObserveUpstream(_ context.Context, route string, _ time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.forwards = append(r.forwards, route)
}

// Every request the server answers runs once through the Observer's
// Around, also one fasthttp refuses before any middleware (headers over
// MaxHeaderBytes); a finished request on a route is observed once, with
// its outcome, and a forward once.
func TestObserverSeesEveryRequestOnce(t *testing.T) {
	for _, tc := range []struct {
		name, path, body, pad string
		status                int
		outcomes, forward     int
		outcome               idempotency.Outcome
	}{
		{"forwarded", "/r", "{}", "", 200, 1, 1, idempotency.Passthrough},
		{"too large", "/r", strings.Repeat("x", 2048), "", 413, 1, 0, idempotency.TooLarge},
		{"headers too large", "/r", "{}", strings.Repeat("p", MaxHeaderBytes), 431, 0, 0, ""},
		{"no route", "/none", "{}", "", 404, 0, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obs := &recorder{}
			s := New(Options{Routes: []*Route{{Name: "r", Path: "/r", Methods: []string{"GET"}}},
				Engine: passEngine{}, Forwarder: &bodyLen{}, BodyLimit: 1024, Observer: obs})
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go func() { _ = s.Serve(ln) }()
			t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
			req, err := http.NewRequest("POST", "http://"+ln.Addr().String()+tc.path, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if tc.pad != "" {
				req.Header.Set("X-Pad", tc.pad)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			obs.mu.Lock()
			defer obs.mu.Unlock()
			if resp.StatusCode != tc.status || obs.arounds != 1 || len(obs.outcomes) != tc.outcomes || len(obs.forwards) != tc.forward {
				t.Fatalf("status %d, %d Arounds, outcomes %v, forwards %v; want %d, 1 Around, %d outcomes, %d forwards",
					resp.StatusCode, obs.arounds, obs.outcomes, obs.forwards, tc.status, tc.outcomes, tc.forward)
			}
			if tc.outcomes == 1 && obs.outcomes[0] != tc.outcome {
				t.Fatalf("outcome %q, want %q", obs.outcomes[0], tc.outcome)
			}
		})
	}
}
