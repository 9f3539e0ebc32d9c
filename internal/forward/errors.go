package forward

import (
	"errors"
	"net/http"
)

// Errors returned by Do, wrapped with the method, the upstream host and the
// underlying cause. Which one it is decides the answer (StatusFor) and whether
// the upstream may have acted on the delivery (Ambiguous).
var (
	// ErrUnreachable: not one byte of the request was written to the
	// upstream (DNS failure, connection refused, dial or TLS handshake
	// failure or timeout, a request net/http refuses to write). The upstream
	// cannot have acted on it: 502, never ambiguous.
	ErrUnreachable = errors.New("upstream unreachable, nothing sent")

	// ErrTimeout: the request was (at least partly) sent and no complete
	// response arrived within the Timeout. 504, ambiguous.
	ErrTimeout = errors.New("upstream timed out after sending")

	// ErrNoAnswer: the request was (at least partly) sent and the connection
	// ended before a complete response: the upstream closed it, reset it, or
	// the caller's context was canceled. 502, ambiguous.
	ErrNoAnswer = errors.New("upstream gave no answer after sending")

	// ErrResponseTooLarge: the upstream answered with a body larger than
	// Options.MaxResponseBody, or with a final answer whose head passes
	// 1 MiB. The answer is known (Do returns its status and the headers
	// that fit), so it is not ambiguous; 502 if it is not used.
	ErrResponseTooLarge = errors.New("upstream response too large")
)

// errTooLarge is readBody's signal, turned into ErrResponseTooLarge with context.
var errTooLarge = errors.New("too large")

// errSwitchedProtocols: the upstream answered 101 to a request that asked
// for no upgrade; no final answer follows.
var errSwitchedProtocols = errors.New("unsolicited 101 Switching Protocols, no final answer")

// errInvalidStatus: the upstream's status line carries a code below 100,
// which is no HTTP status; the delivery was sent and got no answer.
var errInvalidStatus = errors.New("invalid status code")

// Ambiguous reports whether err means the upstream may or may not have acted
// on the delivery: it was sent and no answer came back (SPEC §1,
// record.ambiguous).
func Ambiguous(err error) bool {
	return errors.Is(err, ErrTimeout) || errors.Is(err, ErrNoAnswer)
}

// StatusFor is the gateway status answering a failed forward: 504 for a
// timeout, 502 for everything else (unreachable, cut, too large, a request
// that could not be built). It returns 0 for a nil error.
func StatusFor(err error) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, ErrTimeout):
		return http.StatusGatewayTimeout
	default:
		return http.StatusBadGateway
	}
}
