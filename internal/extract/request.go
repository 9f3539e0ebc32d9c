package extract

import (
	"strings"
	"unsafe"
)

// Request is the read-only view of a delivery the extractors need. Byte
// slices may alias the server's buffers and are valid only during the call;
// the extractors never modify or keep them.
type Request interface {
	// Header returns the first value of the named header (the name is
	// matched case-insensitively), nil if absent. A header that is present
	// but empty should be a non-nil empty slice: fingerprints tell the two
	// apart.
	Header(name string) []byte
	// Query returns the first value of the URL query parameter, nil if
	// absent (non-nil and empty when present but empty).
	Query(name string) []byte
	// Body returns the raw request body.
	Body() []byte
	// ContentType returns the Content-Type header value, parameters included.
	ContentType() []byte
	// Method returns the HTTP method.
	Method() []byte
}

// MapRequest is a Request built from plain values, for tests in this and
// other packages. Its byte slices share memory with its strings: like every
// Request, callers must not modify them.
type MapRequest struct {
	HTTPMethod string
	// Headers maps names to values; Header matches names case-insensitively
	// and ContentType reads "Content-Type" from here.
	Headers map[string]string
	// QueryArgs maps URL query parameter names to values (exact names).
	QueryArgs map[string]string
	RawBody   []byte
}

var _ Request = MapRequest{}

// Header implements Request.
func (m MapRequest) Header(name string) []byte {
	if v, ok := m.Headers[name]; ok {
		return view(v)
	}
	for k, v := range m.Headers {
		if strings.EqualFold(k, name) {
			return view(v)
		}
	}
	return nil
}

// Query implements Request.
func (m MapRequest) Query(name string) []byte {
	if v, ok := m.QueryArgs[name]; ok {
		return view(v)
	}
	return nil
}

// Body implements Request.
func (m MapRequest) Body() []byte { return m.RawBody }

// ContentType implements Request.
func (m MapRequest) ContentType() []byte { return m.Header("Content-Type") }

// Method implements Request.
func (m MapRequest) Method() []byte { return view(m.HTTPMethod) }

// view returns s as a read-only byte slice without copying; a present empty
// value stays non-nil so that it differs from an absent one.
func view(s string) []byte {
	if s == "" {
		return []byte{}
	}
	return unsafe.Slice(unsafe.StringData(s), len(s))
}

// str returns b as a string without copying. The result must not outlive
// the call that received b.
func str(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(unsafe.SliceData(b), len(b))
}
