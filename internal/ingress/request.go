package ingress

import (
	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"
)

// Request is the read-only view of a delivery that extractors and
// verifiers read. Its byte slices alias fasthttp's buffers: valid only
// while the handler runs.
type Request interface {
	Header(name string) []byte
	HeaderValues(name string) [][]byte
	Query(name string) []byte
	Body() []byte
	ContentType() []byte
	Method() []byte
}

// fastRequest adapts a fasthttp request to Request without copying.
type fastRequest struct {
	req *fasthttp.Request
}

func newFastRequest(c *fiber.Ctx) fastRequest { return fastRequest{req: c.Request()} }

// present is a non-nil empty value: a header or parameter that is there
// but empty, unlike one that is absent.
var present = []byte{}

// Header and HeaderValues return field values without the optional
// whitespace around them (RFC 9110 §5.5: SP and HTAB); fasthttp trims
// spaces only.
func (f fastRequest) Header(name string) []byte {
	if v := trimOWS(f.req.Header.Peek(name)); len(v) > 0 {
		return v
	}
	if len(f.req.Header.PeekAll(name)) > 0 {
		return present
	}
	return nil
}

// HeaderCount counts the fields naming the header: fasthttp compares
// names case-insensitively (it canonicalises them).
func (f fastRequest) HeaderCount(name string) int { return len(f.req.Header.PeekAll(name)) }

func (f fastRequest) HeaderValues(name string) [][]byte {
	vs := f.req.Header.PeekAll(name) // fasthttp's scratch slice, rebuilt per call
	for i, v := range vs {
		vs[i] = trimOWS(v)
	}
	return vs
}

// trimOWS cuts the spaces and horizontal tabs around a field value.
func trimOWS(v []byte) []byte {
	for len(v) > 0 && (v[0] == ' ' || v[0] == '\t') {
		v = v[1:]
	}
	for len(v) > 0 && (v[len(v)-1] == ' ' || v[len(v)-1] == '\t') {
		v = v[:len(v)-1]
	}
	return v
}

func (f fastRequest) Query(name string) []byte {
	args := f.req.URI().QueryArgs()
	if v := args.Peek(name); len(v) > 0 {
		return v
	}
	if args.Has(name) {
		return present
	}
	return nil
}

// QueryCount and QueryValues compare names unescaped, as Query does.
func (f fastRequest) QueryCount(name string) int {
	n := 0
	for k := range f.req.URI().QueryArgs().All() {
		if string(k) == name {
			n++
		}
	}
	return n
}

func (f fastRequest) QueryValues(name string) [][]byte {
	return f.req.URI().QueryArgs().PeekMulti(name)
}

// Body is the raw body as received: never decompressed, because signatures
// and fingerprints are over the bytes the provider sent.
func (f fastRequest) Body() []byte { return f.req.Body() }

func (f fastRequest) ContentType() []byte { return f.req.Header.ContentType() }

func (f fastRequest) Method() []byte { return f.req.Header.Method() }

// bodiless is a request whose body was refused (too_large) and not read.
type bodiless struct{ fastRequest }

func (bodiless) Body() []byte { return nil }
