package ingress

import (
	"net/http"

	"github.com/valyala/fasthttp"

	"github.com/hookstamp/hookstamp/internal/forward"
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
