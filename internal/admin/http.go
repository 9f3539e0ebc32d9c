package admin

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
)

// authorized checks the bearer token in constant time. Both sides are
// hashed first so that the comparison always runs over 32 bytes: the
// token's length does not leak either.
func (s *Server) authorized(r *http.Request) bool {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	got := digest(strings.TrimSpace(token))
	return subtle.ConstantTimeCompare(got[:], s.token[:]) == 1
}

func digest(s string) [32]byte { return sha256.Sum256([]byte(s)) }

// unescape percent-decodes one path part, once. "+" stays "+".
func unescape(s string) (string, error) {
	return url.PathUnescape(s)
}

// problemDoc is an RFC 9457 problem document.
type problemDoc struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
}

// problem answers with a problem document. detail is hookstamp's own text:
// never a driver error, never request bytes.
func problem(w http.ResponseWriter, status int, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(problemDoc{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}
