package ingress

import (
	"bytes"
	"strings"

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
func (f fastRequest) HeaderCount(name string) int {
	if isUserAgent(name) {
		if n := len(rawFieldValues(f.req.Header.RawHeaders(), name, nil)); n > 1 {
			return n
		}
	}
	return len(f.req.Header.PeekAll(name))
}

func (f fastRequest) HeaderValues(name string) [][]byte {
	if isUserAgent(name) {
		if vs := rawFieldValues(f.req.Header.RawHeaders(), name, nil); len(vs) > 1 {
			return vs
		}
	}
	vs := f.req.Header.PeekAll(name) // fasthttp's scratch slice, rebuilt per call
	for i, v := range vs {
		vs[i] = trimOWS(v)
	}
	return vs
}

// isUserAgent reports whether name is User-Agent, the one header fasthttp
// keeps only the last line of (it refuses a repeated Host, and a
// Content-Type repeated with another value, itself): its lines are read
// from the header block as received.
func isUserAgent(name string) bool { return strings.EqualFold(name, fasthttp.HeaderUserAgent) }

// rawFieldValues appends to dst the value of each line of the header block
// raw (as fasthttp received it) that names the header, trimmed of optional
// whitespace. A folded line's continuation is not part of the value.
func rawFieldValues(raw []byte, name string, dst [][]byte) [][]byte {
	for len(raw) > 0 {
		line, rest, _ := bytes.Cut(raw, []byte{'\n'})
		raw = rest
		k, v, ok := bytes.Cut(bytes.TrimSuffix(line, []byte{'\r'}), []byte{':'})
		if ok && strings.EqualFold(string(k), name) {
			dst = append(dst, trimOWS(v))
		}
	}
	return dst
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
