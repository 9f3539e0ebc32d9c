package verify

import (
	"net/http"
	"net/textproto"
	"strings"
)

// MapRequest is a Request backed by an http.Header and a body, for tests and
// tools. Header names are matched case-insensitively even when Headers was
// built with non-canonical keys.
type MapRequest struct {
	Headers http.Header
	Payload []byte
}

var _ Request = MapRequest{}

// HeaderValues returns every value of name.
func (m MapRequest) HeaderValues(name string) [][]byte {
	vs, ok := m.Headers[textproto.CanonicalMIMEHeaderKey(name)]
	if !ok {
		for k, v := range m.Headers {
			if strings.EqualFold(k, name) {
				vs = append(vs, v...)
			}
		}
	}
	if len(vs) == 0 {
		return nil
	}
	out := make([][]byte, len(vs))
	for i, v := range vs {
		out[i] = []byte(v)
	}
	return out
}

// Body returns Payload.
func (m MapRequest) Body() []byte { return m.Payload }
