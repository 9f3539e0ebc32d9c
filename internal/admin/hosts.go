package admin

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// Hosts are the host names, besides IP addresses and localhost, that a
// browser may name in Host (admin.console_hosts, admin.listen's host).
// A page served under another name whose DNS then points at the admin
// listener (DNS rebinding) is same-origin to the browser, so the Origin,
// Sec-Fetch and SameSite checks let its requests through; only the name
// it sends tells it apart. An address cannot be rebound.
type Hosts map[string]bool

// NewHosts returns names as compared: lower case, without a final dot.
func NewHosts(names []string) Hosts {
	h := make(Hosts, len(names))
	for _, n := range names {
		h[hostName(n)] = true
	}
	return h
}

// Known reports whether host (Host, with or without a port) is an IP
// address, localhost or one of h. A request without Host (HTTP/1.0)
// comes from no browser.
func (h Hosts) Known(host string) bool {
	if host == "" {
		return true
	}
	if name, _, err := net.SplitHostPort(host); err == nil {
		host = name
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	host = hostName(host)
	return host == "localhost" || h[host]
}

func hostName(h string) string {
	return strings.TrimSuffix(strings.ToLower(h), ".")
}

// fromBrowser reports whether a browser sent r: browsers mark their
// requests with Sec-Fetch-Site (and cross-origin ones with Origin),
// which scripts, Prometheus and kubelets do not send.
func fromBrowser(r *http.Request) bool {
	return r.Header.Get("Sec-Fetch-Site") != "" || r.Header.Get("Origin") != ""
}

// crossOrigin reports whether a browser says r comes from another origin
// (Sec-Fetch-Site, else Origin against Host), by the check the console
// puts on its forms. That check passes every GET and HEAD, which a page
// of another site can send; the API, which no page of its own calls,
// applies it to every method.
func crossOrigin(r *http.Request) bool {
	unsafe := *r
	unsafe.Method = http.MethodPost
	return sameOriginOnly.Check(&unsafe) != nil
}

var sameOriginOnly = http.NewCrossOriginProtection()
