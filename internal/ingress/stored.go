package ingress

import (
	"net/http"
	"net/url"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"github.com/hookstamp/hookstamp/internal/forward"
	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// requestHeader copies fr's header out of fasthttp's buffers, without
// Host and Content-Length, which the forward sets itself.
func requestHeader(fr *fasthttp.Request) http.Header {
	hdr := make(http.Header, fr.Header.Len())
	cookie := false
	for k, v := range fr.Header.All() {
		name := string(k)
		switch name {
		case "Host", "Content-Length":
			continue
		case "Cookie":
			cookie = true
			continue
		}
		hdr[name] = append(hdr[name], string(v))
	}
	if cookie {
		// fasthttp hands Cookie back rebuilt from its parse: the upstream
		// gets the lines as sent (SPEC §4), from the header as received.
		for k, v := range fr.Header.AllInOrder() {
			if string(k) == "Cookie" {
				hdr["Cookie"] = append(hdr["Cookie"], string(v))
			}
		}
	}
	return hdr
}

// upstreamURL is where fr is forwarded: upstream.url, with a prefix
// route's rest of the path and the query as the sender escaped them.
func upstreamURL(fr *fasthttp.Request, route *Route, rest string) string {
	return forward.JoinURL(route.UpstreamURL, escapedRest(rest, fr.URI().Path(), fr.URI().PathOriginal()), escapeRaw(fr.URI().QueryString(), true))
}

// storedRequest is the delivery as record.request keeps it (SPEC §11):
// the path and query it is forwarded to, its headers as StorableHeader
// leaves them, and a copy of its body.
func storedRequest(c *fiber.Ctx, route *Route, rest string) *idempotency.Request {
	fr := c.Request()
	target := upstreamURL(fr, route, rest)
	path := target
	if u, err := url.Parse(target); err == nil {
		path = u.RequestURI()
	}
	return &idempotency.Request{
		Method:  Method(c),
		Path:    path,
		Headers: idempotency.StorableHeader(requestHeader(fr)),
		Body:    append([]byte(nil), fr.Body()...),
	}
}
