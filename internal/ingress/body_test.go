package ingress

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gofiber/fiber/v2"

	"github.com/hookstamp/hookstamp/internal/forward"
	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// passEngine forwards every request, as a route that does not deduplicate.
type passEngine struct{}

func (passEngine) Handle(ctx context.Context, _ *idempotency.Policy, _ idempotency.Delivery, fwd idempotency.ForwardFunc) idempotency.Result {
	return passEngine{}.Passthrough(ctx, fwd)
}

func (passEngine) Passthrough(ctx context.Context, fwd idempotency.ForwardFunc) idempotency.Result {
	up, err := fwd(ctx)
	if err != nil {
		return idempotency.Result{Outcome: idempotency.Unavailable, Status: 503, Err: err}
	}
	return idempotency.Result{Outcome: idempotency.Passthrough, Upstream: up}
}

// bodyLen answers 200 and remembers the length of the body it was sent.
type bodyLen struct{ n int }

func (b *bodyLen) Do(_ context.Context, r *forward.Request) (*forward.Response, error) {
	b.n = len(r.Body)
	return &forward.Response{Status: 200}, nil
}

// Options.BodyLimit 0 is Fiber's default, 4 MiB, for the bodies the server
// reads itself as for Fiber: not a limit of 0 that would refuse every
// body.
func TestZeroBodyLimitIsFibersDefault(t *testing.T) {
	fwd := &bodyLen{}
	s := New(Options{Routes: []*Route{{Name: "r", Path: "/r", Methods: []string{"GET"}}},
		Engine: passEngine{}, Forwarder: fwd})
	for _, c := range []struct {
		size, status int
	}{{2 << 20, 200}, {fiber.DefaultBodyLimit, 200}, {fiber.DefaultBodyLimit + 1, 413}} {
		resp, err := s.App().Test(httptest.NewRequest("POST", "/r", strings.NewReader(strings.Repeat("x", c.size))), -1)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.status || (c.status == 200 && fwd.n != c.size) {
			t.Errorf("%d-byte body: %d, forwarded %d bytes; want %d", c.size, resp.StatusCode, fwd.n, c.status)
		}
	}
}
