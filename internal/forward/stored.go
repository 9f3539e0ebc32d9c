package forward

import (
	"net/http"
	"net/url"
)

// Stored is a delivery as kept for later delivery (SPEC §11).
type Stored struct {
	Method string
	// Path is the upstream request's path and query, as first forwarded.
	Path string
	// Header is what the upstream got, less the key header, the trace
	// context, Authorization and Cookie; X-Forwarded-* as at intake.
	Header http.Header
	Body   []byte
}

// notStored are headers a stored request never keeps: credentials are not
// written to the ledger, and each attempt sets its own key and trace.
var notStored = []string{"Authorization", "Cookie", "Traceparent", "Tracestate"}

// Store is r as a stored delivery.
func Store(r *Request) Stored {
	h := outgoingHeader(r)
	if r.KeyHeader != "" {
		h.Del(r.KeyHeader)
	}
	for _, name := range notStored {
		delete(h, name)
	}
	path := "/"
	if u, err := url.Parse(r.URL); err == nil {
		path = u.RequestURI()
	}
	return Stored{Method: r.Method, Path: path, Header: h, Body: r.Body}
}

// Request is the stored delivery sent again to upstream (upstream.url:
// its scheme, credentials and host), as at intake: its X-Forwarded-*
// values are those the gateway set then, and the rest of its header was
// filtered then. So only a Store result may be sent through it: a
// sender's header stored as sent would be believed here.
func (s Stored) Request(upstream, keyHeader, key string) *Request {
	h := s.Header.Clone()
	r := &Request{Method: s.Method, URL: rebase(upstream, s.Path), Header: h, Body: s.Body, TrustedPeer: true,
		ClientIP: h.Get("X-Forwarded-For"), Proto: h.Get("X-Forwarded-Proto"), Host: h.Get("X-Forwarded-Host"),
		KeyHeader: keyHeader, Key: key}
	return r
}

// rebase is path (with its query) on upstream's scheme, credentials and
// host.
func rebase(upstream, path string) string {
	u, err := url.Parse(upstream)
	if err != nil {
		return upstream
	}
	base := url.URL{Scheme: u.Scheme, User: u.User, Host: u.Host}
	return base.String() + path
}
