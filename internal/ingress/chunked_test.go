package ingress

import (
	"testing"

	"github.com/valyala/fasthttp"
)

func TestChunkedRoutesCarryAndForget(t *testing.T) {
	var cr chunkedRoutes
	a, b := &Route{Name: "a"}, &Route{Name: "b"}
	h1, h2 := new(fasthttp.RequestHeader), new(fasthttp.RequestHeader)
	if _, ok := cr.take(h1); ok {
		t.Fatal("take on an empty set found something")
	}
	cr.put(h1, chunkedRequest{route: a, method: "POST"})
	cr.put(h1, chunkedRequest{route: b, method: "PUT"}) // the next request on the same RequestCtx
	cr.put(h2, chunkedRequest{route: a, method: "POST"})
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

// Entries that no handler takes out (clients gone mid-body) are bounded,
// and a full set never hands an earlier request's entry to a later one.
func TestChunkedRoutesBounded(t *testing.T) {
	var cr chunkedRoutes
	r := &Route{Name: "r"}
	headers := make([]*fasthttp.RequestHeader, maxChunked+10)
	for i := range headers {
		headers[i] = new(fasthttp.RequestHeader)
		cr.put(headers[i], chunkedRequest{route: r, method: "POST"})
	}
	if n := cr.n.Load(); n != maxChunked {
		t.Fatalf("%d entries held, want the bound %d", n, maxChunked)
	}
	// Full: a new request on a RequestCtx with a stale entry drops it.
	cr.put(headers[0], chunkedRequest{route: &Route{Name: "new"}, method: "POST"})
	if got, ok := cr.take(headers[0]); ok {
		t.Fatalf("a full set handed out %q, an earlier request's entry", got.route.Name)
	}
}
