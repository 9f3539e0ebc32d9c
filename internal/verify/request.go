package verify

import (
	"net/http"
	"net/textproto"
	"net/url"
	"strings"
)

// MapRequest is a Request backed by an http.Header and a body, for tests and
// tools. Header names are matched case-insensitively even when Headers was
// built with non-canonical keys.
type MapRequest struct {
	Headers http.Header
	Payload []byte
	// HTTPMethod and URLQuery are what Method and Query read; the zero
	// method is POST.
	HTTPMethod string
	URLQuery   url.Values
}

var _ QueryRequest = MapRequest{}

// Method returns HTTPMethod, POST when it is empty.
func (m MapRequest) Method() []byte {
	if m.HTTPMethod == "" {
		return []byte("POST")
	}
	return []byte(m.HTTPMethod)
}

// Query returns the first value of the query parameter name, nil if absent.
func (m MapRequest) Query(name string) []byte {
	vs, ok := m.URLQuery[name]
	if !ok {
		return nil
	}
	if len(vs) == 0 {
		return []byte{}
	}
	return []byte(vs[0])
}

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
