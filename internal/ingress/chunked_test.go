package ingress

import (
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

func TestChunkedRoutesCarryAndForget(t *testing.T) {
	var cr chunkedRoutes
	a, b := &Route{Name: "a"}, &Route{Name: "b"}
	h1, h2 := new(fasthttp.RequestHeader), new(fasthttp.RequestHeader)
	if _, ok := cr.take(h1); ok {
		t.Fatal("take on an empty set found something")
	}
	cr.put(h1, chunkedRequest{route: a, method: "POST"}, time.Minute)
	cr.put(h1, chunkedRequest{route: b, method: "PUT"}, time.Minute) // the next request on the same RequestCtx
	cr.put(h2, chunkedRequest{route: a, method: "POST"}, time.Minute)
	if got, ok := cr.take(h1); !ok || got.route != b || got.method != "PUT" {
		t.Fatalf("take(h1) = %+v, %v; want the latest request's route b, PUT", got, ok)
	}
	if _, ok := cr.take(h1); ok {
		t.Fatal("an entry was taken twice")
	}
	if got, ok := cr.take(h2); !ok || got.route != a {
		t.Fatalf("take(h2) = %+v, %v", got, ok)
	}
	if n := cr.n.Load(); n != 0 {
		t.Fatalf("%d entries counted after every one was taken", n)
	}
}

// Entries that no handler takes out (clients gone mid-body) are bounded, a
// full set never hands an earlier request's entry to a later one, and
// entries older than a body can take to arrive make room.
func TestChunkedRoutesBounded(t *testing.T) {
	var cr chunkedRoutes
	r := &Route{Name: "r"}
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	headers := make([]*fasthttp.RequestHeader, maxChunked+10)
	for i := range headers {
		headers[i] = new(fasthttp.RequestHeader)
		cr.put(headers[i], chunkedRequest{route: r, method: "POST", at: t0}, 10*time.Second)
	}
	if n := cr.n.Load(); n != maxChunked {
		t.Fatalf("%d entries held, want the bound %d", n, maxChunked)
	}
	// Full: a new request on a RequestCtx with a stale entry drops it.
	cr.put(headers[0], chunkedRequest{route: &Route{Name: "new"}, method: "POST", at: t0.Add(time.Second)}, 10*time.Second)
	if got, ok := cr.take(headers[0]); ok {
		t.Fatalf("a full set handed out %q, an earlier request's entry", got.route.Name)
	}
	cr.put(new(fasthttp.RequestHeader), chunkedRequest{route: r, method: "POST", at: t0}, 10*time.Second) // full again
	if n := cr.n.Load(); n != maxChunked {
		t.Fatalf("%d entries held, want the bound %d", n, maxChunked)
	}
	// Past the read timeout every entry left is a request that can no
	// longer be read: a new one is noted again.
	fresh := new(fasthttp.RequestHeader)
	cr.put(fresh, chunkedRequest{route: &Route{Name: "fresh"}, method: "POST", at: t0.Add(11 * time.Second)}, 10*time.Second)
	if got, ok := cr.take(fresh); !ok || got.route.Name != "fresh" {
		t.Fatalf("with only stale entries held, a new one was not noted (%+v, %v)", got, ok)
	}
	if n := cr.n.Load(); n != 0 {
		t.Fatalf("%d entries held after the stale ones were dropped and the fresh one taken", n)
	}
}
