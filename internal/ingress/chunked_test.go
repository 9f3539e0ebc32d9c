package ingress

import (
	"bufio"
	"strings"
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

// What the error handler finds for a RequestCtx's header is its current
// request's, or nothing: a note an earlier request left behind on the same
// header (its client gone mid-body) is replaced, or dropped when the new
// request is not chunked or has no route.
func TestHeaderReceivedNotesOnlyTheCurrentRequest(t *testing.T) {
	s := &Server{router: newRouter([]*Route{{Name: "a", Path: "/a"}, {Name: "b", Path: "/b"}})}
	h := new(fasthttp.RequestHeader)
	receive := func(raw string) {
		t.Helper()
		h.Reset()
		if err := h.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
			t.Fatalf("header %q: %v", raw, err)
		}
		s.headerReceived(h)
	}
	chunkedTo := func(path string) string {
		return "POST " + path + " HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
	}
	for _, tc := range []struct {
		name, next string
		want       string // route the note names; "" = no note
	}{
		{"chunked to another route", chunkedTo("/b"), "b"},
		{"not chunked", "POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n", ""},
		{"chunked to no route", chunkedTo("/nowhere"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			receive(chunkedTo("/a")) // its client vanishes: the note stays
			receive(tc.next)
			got, ok := s.chunked.take(h)
			switch {
			case tc.want == "" && ok:
				t.Fatalf("the next request found the note of route %q", got.route.Name)
			case tc.want != "" && (!ok || got.route.Name != tc.want):
				t.Fatalf("note = %+v, %v; want route %q", got, ok, tc.want)
			}
			if n := s.chunked.n.Load(); n != 0 {
				t.Fatalf("%d notes left", n)
			}
		})
	}
}
