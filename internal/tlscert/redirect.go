package tlscert

import (
	"net"
	"net/http"
	"strconv"
)

// RedirectHandler answers server.redirect_listen: ACME HTTP-01 challenges
// (of this replica or, through the shared storage, of another), and a 308
// to https for everything else, on the host the client asked for and the
// port of server.listen (left out when it is 443). 308, not 301: a POST
// stays a POST with its body.
func (m *Manager) RedirectHandler(httpsPort int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if m.acme != nil && m.acme.issuer.HandleHTTPChallenge(w, r) {
			return
		}
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if host == "" {
			http.Error(w, "no Host header: cannot redirect to https", http.StatusBadRequest)
			return
		}
		if ip := net.ParseIP(host); ip != nil && ip.To4() == nil {
			host = "[" + host + "]"
		}
		if httpsPort != 443 {
			host += ":" + strconv.Itoa(httpsPort)
		}
		w.Header().Set("Connection", "close")
		http.Redirect(w, r, "https://"+host+r.URL.RequestURI(), http.StatusPermanentRedirect)
	})
}
