package ingress

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"
)

// registeredMethods are the IANA-registered methods Fiber does not know by
// default, PRI (the HTTP/2 preface) excepted.
var registeredMethods = []string{
	"ACL", "BASELINE-CONTROL", "BIND", "CHECKIN", "CHECKOUT", "COPY", "LABEL", "LINK", "LOCK",
	"MERGE", "MKACTIVITY", "MKCALENDAR", "MKCOL", "MKREDIRECTREF", "MKWORKSPACE", "MOVE",
	"ORDERPATCH", "PROPFIND", "PROPPATCH", "QUERY", "REBIND", "REPORT", "SEARCH", "UNBIND",
	"UNCHECKOUT", "UNLINK", "UNLOCK", "UPDATE", "UPDATEREDIRECTREF", "VERSION-CONTROL",
}

// Method is the request's method as a string that outlives the request
// (spans and log records are read later): c.Method() points into a buffer
// the connection's next request overwrites.
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
// first, the rest of the registry, and any other a route deduplicates.
// Fiber refuses a method outside its list before any handler runs.
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
// document (RFC 9110 §15.6.2) rather than Fiber's plain-text 400. It is
// refused before routing, so it has no outcome.
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
			// Its framing was not checked: nothing after it is read.
			rc.SetConnectionClose()
			return
		}
		next(rc)
	}
}
