package ingress

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"
)

// registeredMethods are the methods of the IANA HTTP Method Registry that
// Fiber does not know by default (fiber.DefaultMethods), PRI excepted (the
// HTTP/2 preface, never a request).
var registeredMethods = []string{
	"ACL", "BASELINE-CONTROL", "BIND", "CHECKIN", "CHECKOUT", "COPY", "LABEL", "LINK", "LOCK",
	"MERGE", "MKACTIVITY", "MKCALENDAR", "MKCOL", "MKREDIRECTREF", "MKWORKSPACE", "MOVE",
	"ORDERPATCH", "PROPFIND", "PROPPATCH", "QUERY", "REBIND", "REPORT", "SEARCH", "UNBIND",
	"UNCHECKOUT", "UNLINK", "UNLOCK", "UPDATE", "UPDATEREDIRECTREF", "VERSION-CONTROL",
}

// Method is the request's method as a string that outlives the request,
// for what is kept after it (a span's name and attributes, which the
// exporter reads later; log records). c.Method() points into fasthttp's
// request buffer, which the connection's next request overwrites. The
// common methods are Fiber's constants; others are copied.
func Method(c *fiber.Ctx) string {
	m := c.Method()
	for _, k := range fiber.DefaultMethods {
		if m == k {
			return k
		}
	}
	return strings.Clone(m)
}

// requestMethods are the methods the server serves: Fiber's defaults
// first (the common ones are found in a few comparisons), the rest of the
// registry, and any other method a route deduplicates. Fiber answers a
// method outside its list before any handler runs, so a route's
// "methods: [POST, NOTIFY]" would otherwise never see a NOTIFY.
func requestMethods(routes []*Route) []string {
	out := append(slices.Clone(fiber.DefaultMethods), registeredMethods...)
	for _, r := range routes {
		for _, m := range r.Methods {
			if !slices.Contains(out, m) {
				out = append(out, m)
			}
		}
	}
	return out
}

// refuseUnknownMethods answers a method outside methods with a 501 problem
// document (RFC 9110 §15.6.2: a method the server does not recognise),
// where Fiber would send a plain-text 400 "Invalid http method". Such a
// request is refused before routing, like a path no route serves, so it
// has no outcome.
func refuseUnknownMethods(methods []string, next fasthttp.RequestHandler) fasthttp.RequestHandler {
	known := make(map[string]bool, len(methods))
	for _, m := range methods {
		known[m] = true
	}
	body, _ := json.Marshal(Problem{Type: "about:blank", Title: http.StatusText(http.StatusNotImplemented),
		Status: http.StatusNotImplemented,
		Detail: "hookstamp does not forward this method: list it in a route's methods to have it deduplicated and forwarded"})
	return func(rc *fasthttp.RequestCtx) {
		if !known[string(rc.Method())] {
			rc.Response.Header.SetContentType("application/problem+json")
			rc.SetStatusCode(http.StatusNotImplemented)
			rc.SetBody(body)
			// Its framing was not checked (framing runs in the handler):
			// whatever follows on the connection is not read.
			rc.SetConnectionClose()
			return
		}
		next(rc)
	}
}
