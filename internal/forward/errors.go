package forward

import (
	"errors"
	"net/http"
)

// Errors returned by Do, wrapped with the method, the upstream host and the
// underlying cause. Which one it is decides the answer (StatusFor) and whether
// the upstream may have acted on the delivery (Ambiguous).
var (
	// ErrUnreachable: not one byte of the request was written (DNS, dial,
	// TLS handshake). 502, never ambiguous.
	ErrUnreachable = errors.New("upstream unreachable, nothing sent")

	// ErrTimeout: sent, and no complete response within the Timeout. 504,
	// ambiguous.
	ErrTimeout = errors.New("upstream timed out after sending")

	// ErrNoAnswer: sent, and the connection ended before a complete
	// response (closed, reset, or the caller's context ended). 502, ambiguous.
	ErrNoAnswer = errors.New("upstream gave no answer after sending")

	// ErrResponseTooLarge: the body is over Options.MaxResponseBody, or a
	// final answer's head passes 1 MiB. Do returns status and the headers
	// that fit: not ambiguous.
	ErrResponseTooLarge = errors.New("upstream response too large")

	// ErrUnreadableAnswer: a final answer's head is not valid HTTP (a
	// field that is not HTTP, Content-Length given twice, an unknown
	// transfer coding), or its body was cut short (a reset, a malformed
	// chunk, the time running out). Do returns status and the valid
	// headers: not ambiguous, since the upstream answered.
	ErrUnreadableAnswer = errors.New("upstream answer unreadable")
)

// errUnreadableHead is readAnswer's signal, turned into
// ErrUnreadableAnswer with context.
var errUnreadableHead = errors.New("unreadable head")

// errBrokenBody is readAnswer's signal of a body that failed after a
// final head, turned into ErrUnreadableAnswer.
var errBrokenBody = errors.New("body cut short")

// answered reports a readAnswer error after which its answer still
// stands: a final head was read, only what followed it failed.
func answered(err error) bool {
	return err == errTooLarge || err == errHeadTooLarge || errors.Is(err, errUnreadableHead) || errors.Is(err, errBrokenBody)
}

// HeadOnly reports whether Do's resp and err are an answer without its
// body (ErrResponseTooLarge, ErrUnreadableAnswer): settle on its status.
func HeadOnly(resp *Response, err error) bool {
	return resp != nil && (errors.Is(err, ErrResponseTooLarge) || errors.Is(err, ErrUnreadableAnswer))
}

// errTooLarge is readBody's signal, turned into ErrResponseTooLarge with context.
var errTooLarge = errors.New("too large")

var errSwitchedProtocols = errors.New("unsolicited 101 Switching Protocols, no final answer")

var errInvalidStatus = errors.New("invalid status code")

// Ambiguous reports whether err means the upstream may or may not have acted
// on the delivery: it was sent and no answer came back (SPEC §1,
// record.ambiguous).
func Ambiguous(err error) bool {
	return errors.Is(err, ErrTimeout) || errors.Is(err, ErrNoAnswer)
}

// StatusFor is the gateway status answering a failed forward: 504 for a
// timeout, else 502; 0 for a nil error.
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
