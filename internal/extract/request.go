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
	// HeaderCount returns how many fields name the header. Keys read it
	// on every delivery: it should not allocate.
	HeaderCount(name string) int
	// HeaderValues returns the value of each field naming the header, in
	// the order received, each as Header would return it; nil if absent.
	// It is read only for a header given more than once, and may return
	// scratch space that the next call reuses.
	HeaderValues(name string) [][]byte
	// Query returns the first value of the URL query parameter, nil if
	// absent (non-nil and empty when present but empty).
	Query(name string) []byte
	// QueryCount and QueryValues are HeaderCount and HeaderValues for a
	// URL query parameter.
	QueryCount(name string) int
	QueryValues(name string) [][]byte
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
	// HeaderLists and QueryLists give every value of a header or query
	// parameter, in order, for one given more than once; a name found here
	// is not looked for in Headers or QueryArgs.
	HeaderLists map[string][]string
	QueryLists  map[string][]string
	RawBody     []byte
}

var _ Request = MapRequest{}

// Header implements Request.
func (m MapRequest) Header(name string) []byte {
	if vs, ok := m.headerList(name); ok {
		return first(vs)
	}
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

// HeaderCount implements Request.
func (m MapRequest) HeaderCount(name string) int {
	if vs, ok := m.headerList(name); ok {
		return len(vs)
	}
	return count(m.Header(name))
}

// HeaderValues implements Request.
func (m MapRequest) HeaderValues(name string) [][]byte {
	if vs, ok := m.headerList(name); ok {
		return views(vs)
	}
	return single(m.Header(name))
}

func (m MapRequest) headerList(name string) ([]string, bool) {
	if vs, ok := m.HeaderLists[name]; ok {
		return vs, true
	}
	for k, vs := range m.HeaderLists {
		if strings.EqualFold(k, name) {
			return vs, true
		}
	}
	return nil, false
}

// Query implements Request.
func (m MapRequest) Query(name string) []byte {
	if vs, ok := m.QueryLists[name]; ok {
		return first(vs)
	}
	if v, ok := m.QueryArgs[name]; ok {
		return view(v)
	}
	return nil
}

// QueryCount implements Request.
func (m MapRequest) QueryCount(name string) int {
	if vs, ok := m.QueryLists[name]; ok {
		return len(vs)
	}
	return count(m.Query(name))
}

// QueryValues implements Request.
func (m MapRequest) QueryValues(name string) [][]byte {
	if vs, ok := m.QueryLists[name]; ok {
		return views(vs)
	}
	return single(m.Query(name))
}

func first(vs []string) []byte {
	if len(vs) == 0 {
		return nil
	}
	return view(vs[0])
}

func count(v []byte) int {
	if v == nil {
		return 0
	}
	return 1
}

func single(v []byte) [][]byte {
	if v == nil {
		return nil
	}
	return [][]byte{v}
}

func views(vs []string) [][]byte {
	if len(vs) == 0 {
		return nil
	}
	out := make([][]byte, len(vs))
	for i, v := range vs {
		out[i] = view(v)
	}
	return out
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
