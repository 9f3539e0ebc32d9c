package idempotency

import (
	"net/http"
	"net/textproto"
	"strings"
)

// neverStored are the request headers a stored request leaves out (SPEC
// §11): hop-by-hop headers (RFC 9110 §7.6.1), which describe one
// connection, and credentials, which an operator reading the event log
// must not see.
var neverStored = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true, "Proxy-Authorization": true,
	"Proxy-Connection": true, "Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
	"Authorization": true, "Cookie": true,
}

// StorableHeader returns a copy of h as a stored request keeps it: names
// canonical, without hop-by-hop headers (those Connection names too),
// Authorization or Cookie. The ledger stores every request's headers
// through it, whatever filtered them before.
func StorableHeader(h http.Header) http.Header {
	named := map[string]bool{}
	for _, v := range h.Values("Connection") {
		for name := range strings.SplitSeq(v, ",") {
			if name = textproto.TrimString(name); name != "" {
				named[textproto.CanonicalMIMEHeaderKey(name)] = true
			}
		}
	}
	out := make(http.Header, len(h))
	for name, values := range h {
		c := textproto.CanonicalMIMEHeaderKey(name)
		if neverStored[c] || named[c] {
			continue
		}
		out[c] = append(out[c], values...)
	}
	return out
}
