package admin

import (
	"net/http"
	"testing"
)

// Only a write that is net/http's refusal whole is rewritten: a console
// page showing a stored request body that holds one (a sender may pad
// its request so that the text starts a write) passes unchanged.
func TestCannedStatusMatchesWholeRefusalsOnly(t *testing.T) {
	const h = cannedHeaders
	for _, c := range []struct {
		name   string
		write  string
		status int // 0: not a refusal
	}{
		{"400", "HTTP/1.1 400 Bad Request" + h + "400 Bad Request", 400},
		{"400 with a reason", "HTTP/1.1 400 Bad Request: missing required Host header" + h + "400 Bad Request: missing required Host header", 400},
		{"431", "HTTP/1.1 431 Request Header Fields Too Large" + h + "431 Request Header Fields Too Large", 431},
		{"501", "HTTP/1.1 501 Not Implemented" + h + "Unsupported transfer encoding", 501},
		{"a page's text from a refusal on", "HTTP/1.1 404 Not Found" + h + "404 Not Found</code></pre>\n</main>", 0},
		{"a refusal's head with another body", "HTTP/1.1 400 Bad Request" + h + `{"pad":"x"}`, 0},
		{"a success", "HTTP/1.1 200 OK" + h + "200 OK", 0},
		{"no status line", "400 Bad Request" + h + "400 Bad Request", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, ok := cannedStatus([]byte(c.write))
			if ok != (c.status != 0) || status != c.status {
				t.Fatalf("cannedStatus = %d, %v; want %d (%s)", status, ok, c.status, http.StatusText(c.status))
			}
		})
	}
}
