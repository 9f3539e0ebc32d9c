package forward

import (
	"bytes"
	"net/http"
	"net/textproto"
	"strconv"

	"golang.org/x/net/http/httpguts"
)

// truncatedAnswer is the final answer whose head did not fit in
// maxResponseHead, from head, the bytes read of it (interim 1xx answers
// first): its status and the header fields on the complete lines that
// did fit, without a body. nil when head holds no final status line. The
// upstream did answer, and what it answered is final or not by its
// status like any other answer: reporting no answer would have the
// provider's retry forwarded again after the upstream acted on the first.
func truncatedAnswer(head []byte) *Response { return finalHead(head, false) }

// unreadableAnswer is the final answer whose whole head net/http refused
// (a field name or value that is not HTTP, Content-Length given twice or
// unequal, a transfer coding it does not know), from head: its status and
// the fields that are valid, without a body, whose framing is not to be
// trusted. nil when head holds no whole final head. As with
// truncatedAnswer, the upstream did answer.
func unreadableAnswer(head []byte) *Response { return finalHead(head, true) }

// finalHead is the first final answer in head: when whole, only one whose
// head ends in head; otherwise only one whose head does not.
func finalHead(head []byte, whole bool) *Response {
	for {
		line, rest, ok := bytes.Cut(head, []byte("\n"))
		if !ok {
			return nil
		}
		status, ok := statusOf(bytes.TrimSuffix(line, []byte("\r")))
		if !ok {
			return nil
		}
		h := http.Header{}
		for head = rest; ; {
			line, rest, ok = bytes.Cut(head, []byte("\n"))
			if !ok {
				// The head ends inside this answer's header section.
				if status < 200 || whole {
					return nil
				}
				removeHopByHop(h)
				return &Response{Status: status, Header: h}
			}
			head = rest
			line = bytes.TrimSuffix(line, []byte("\r"))
			if len(line) == 0 {
				break // the end of an interim answer's head
			}
			name, value, ok := bytes.Cut(line, []byte(":"))
			if ok && httpguts.ValidHeaderFieldName(string(name)) && httpguts.ValidHeaderFieldValue(string(value)) {
				h.Add(textproto.CanonicalMIMEHeaderKey(string(name)), textproto.TrimString(string(value)))
			}
		}
		if status >= 200 {
			if !whole {
				return nil // a whole final head: not what overflowed
			}
			removeHopByHop(h)
			return &Response{Status: status, Header: h}
		}
	}
}

// statusOf reads the status code of a status line ("HTTP/1.1 200 OK").
func statusOf(line []byte) (int, bool) {
	proto, rest, ok := bytes.Cut(line, []byte(" "))
	if !ok || !bytes.HasPrefix(proto, []byte("HTTP/1.")) || len(rest) < 3 || len(rest) > 3 && rest[3] != ' ' {
		return 0, false
	}
	code, err := strconv.Atoi(string(rest[:3]))
	if err != nil || code < 100 || code == http.StatusSwitchingProtocols {
		return 0, false
	}
	return code, true
}
