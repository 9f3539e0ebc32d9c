package ingress

import (
	"errors"
	"io"
	"net"
	"slices"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"
)

// The server streams request bodies (fiber.Config.StreamRequestBody), and
// the handler reads each body itself, before anything else, with
// readBody.
//
// fasthttp left to read a body reserves the declared Content-Length (up
// to server.body_limit, rounded up to a power of two) as soon as the
// header arrives and holds it until the body is in: a client opening many
// connections, each promising a large body and sending none, made a
// replica reserve connections × 2 × body_limit. Streamed, fasthttp reads
// at most the first 8 KiB, and readBody grows its buffer only as bytes
// arrive. The handler also sees every request whose body is too large
// with its header intact, so that the 413 is counted on its route, also
// for a chunked body (which fasthttp, reading it, reset before its error
// handler ran).

// pooledBody bounds the bodies whose buffers go back to the pool: a
// webhook is a few KiB, and a rare large one should not stay pinned.
const pooledBody = 64 << 10

// readBody reads the request's body into a buffer of the server's, up to
// BodyLimit, and makes it the request's body (fasthttp's Request.Body then
// returns it without reading). The buffer is handed back with release once
// nothing reads the request any more. A body over the limit is refused
// with 413 unread, one that cannot be read (the client stalled past
// server.read_timeout, vanished, or sent a malformed chunk) with 408 or
// 400; either way the connection is closed, since what follows on it is
// not where a next request starts.
func (s *Server) readBody(rc *fasthttp.RequestCtx) (release func(), err error) {
	req := &rc.Request
	if !req.IsBodyStream() {
		return func() {}, nil
	}
	limit := s.o.BodyLimit
	if req.Header.ContentLength() > limit { // -1 chunked: counted as read
		rc.SetConnectionClose()
		return nil, fiber.ErrRequestEntityTooLarge
	}
	bp := s.bodies.Get().(*[]byte)
	release = func() {
		if cap(*bp) <= pooledBody {
			s.bodies.Put(bp)
		}
	}
	b := (*bp)[:0]
	stream := rc.RequestBodyStream()
	for {
		if len(b) == cap(b) {
			// Grow by what has arrived (append's doubling), never past
			// the limit plus the byte that proves a body over it.
			b = slices.Grow(b, min(max(cap(b), 4<<10), limit+1-len(b)))
		}
		n, rerr := stream.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		*bp = b
		if len(b) > limit {
			release()
			rc.SetConnectionClose()
			return nil, fiber.ErrRequestEntityTooLarge
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			release()
			rc.SetConnectionClose()
			return nil, bodyReadError(rerr)
		}
	}
	req.SetBodyRaw(b)
	return release, nil
}

// bodyReadError is the answer to a body that could not be read, as
// Fiber's own error handler maps fasthttp's errors: a timeout is 408,
// anything else (a malformed chunk, a client gone mid-body) 400.
func bodyReadError(err error) error {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fiber.ErrRequestTimeout
	}
	return fiber.ErrBadRequest
}
