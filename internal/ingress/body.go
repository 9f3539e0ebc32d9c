package ingress

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"time"

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

// prefetched is what fasthttp reads of a streamed body before the handler
// runs: all of it up to this size.
const prefetched = 8 << 10

// readBody reads the request's body into a buffer of the server's, up to
// BodyLimit, and makes it the request's body (fasthttp's Request.Body then
// returns it without reading). The buffer is handed back with release once
// nothing reads the request any more. A declared length over the limit
// is refused with 413 unread (declared is the Content-Length as received:
// see headerReceived), a chunked body with 413 as soon as it passes the
// limit, one that cannot be read (the client stalled past
// server.read_timeout, vanished, or sent a malformed chunk) with 408 or
// 400; each time the connection is closed, since what follows on it is
// not where a next request starts.
func (s *Server) readBody(rc *fasthttp.RequestCtx, declared int) (release func(), err error) {
	req := &rc.Request
	limit := s.o.BodyLimit
	if declared > limit { // its Content-Length was set to 0 by headerReceived
		rc.SetConnectionClose()
		return nil, fiber.ErrRequestEntityTooLarge
	}
	if !req.IsBodyStream() {
		return func() {}, nil
	}
	bp := s.bodies.Get().(*[]byte)
	release = func() {
		if cap(*bp) <= pooledBody {
			s.bodies.Put(bp)
		}
	}
	b := (*bp)[:0]
	stream := rc.RequestBodyStream()
	cl := req.Header.ContentLength() // -1: chunked
	if cl < 0 || cl > prefetched {
		// Part of the body is still to come from the connection: if it
		// is still arriving when Shutdown abandons the deliveries in
		// flight, it is cut then (408), not waited for until
		// read_timeout. (A body fasthttp prefetched whole is read from
		// memory.)
		conn := rc.Conn() // not rc in the callback: it is reused once handle returns
		stop := context.AfterFunc(s.abandon, func() { _ = conn.SetReadDeadline(time.Now()) })
		defer stop()
	}
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
			// Past the prefetch, fasthttp's stream passes the
			// connection's own EOF on as the body's end: a body cut
			// short by a close would be forwarded and recorded as the
			// delivery, and the whole one, resent, refused as a key
			// reused with another body.
			//
			// A chunked body ends with its last chunk, and fasthttp's
			// stream says io.EOF too when the connection ends between
			// two chunks (or inside the trailer section): it has ended
			// before the last chunk if a read on the connection failed,
			// since the last chunk and the blank line after it are read
			// from bytes that arrived, never past them.
			if cl >= 0 && len(b) != cl || cl < 0 && readEnded(rc.Conn()) {
				release()
				rc.SetConnectionClose()
				return nil, bodyReadError(io.ErrUnexpectedEOF)
			}
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

// headerReceived is fasthttp's Server.HeaderReceived. Streaming, fasthttp
// reads the first 8 KiB of a body before the handler runs, of one whose
// declared length is over the limit too (waiting for them until
// read_timeout): such a request's Content-Length is taken as 0 here, so
// that it reaches the handler at once, which refuses it 413 on the length
// framing reads from the header as received. Its connection is closed
// after the answer whatever answers it: its body, unread, must never be
// parsed as the next request.
func (s *Server) headerReceived(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
	if h.ContentLength() > s.o.BodyLimit {
		h.SetContentLength(0)
		h.SetConnectionClose()
	}
	return fasthttp.RequestConfig{}
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
