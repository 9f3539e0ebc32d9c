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

func (f fastRequest) Header(name string) []byte {
	v := f.req.Header.Peek(name)
	if v == nil {
		return nil
	}
	return v
}

func (f fastRequest) HeaderValues(name string) [][]byte {
	return f.req.Header.PeekAll(name)
}

func (f fastRequest) Query(name string) []byte {
	return f.req.URI().QueryArgs().Peek(name)
}

// Body is the raw body as received: never decompressed, because signatures
// and fingerprints are over the bytes the provider sent.
func (f fastRequest) Body() []byte { return f.req.Body() }

func (f fastRequest) ContentType() []byte { return f.req.Header.ContentType() }

func (f fastRequest) Method() []byte { return f.req.Header.Method() }
