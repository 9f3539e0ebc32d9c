package gateway

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/libtnb/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/hookstamp/hookstamp/internal/config"
)

// Helpers shared by the trust tests (presets, poisoning, signatures,
// hostile input). The core helpers (send, wantOutcome, …) are in
// harness_test.go.

// routesConfig is a test configuration with the given routes (YAML list
// entries, indented two spaces) and SQLite in dbPath; top is YAML merged at
// the top level (whole sections other than server, admin and store).
// environ feeds ${NAME} references, as the process environment would.
func routesConfig(tb testing.TB, dbPath, server, top, routes string, environ []string) *config.Config {
	tb.Helper()
	y := fmt.Sprintf(`
server:
  listen: "127.0.0.1:0"
  shutdown_timeout: 5s
%s
admin:
  listen: ""
store:
  driver: sqlite
  dsn: %q
  sweep_interval: 1h
%s
routes:
%s
`, server, dbPath, top, routes)
	cfg, err := config.LoadFromBytes([]byte(y), environ)
	if err != nil {
		tb.Fatalf("config: %v\n%s", err, y)
	}
	return cfg
}

// post sends body with every value of hdr (repeated headers stay repeated).
func post(tb testing.TB, g *Gateway, path string, body []byte, hdr http.Header) reply {
	tb.Helper()
	req, err := http.NewRequest(http.MethodPost, g.URL()+path, bytes.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	for name, vals := range hdr {
		for _, v := range vals {
			req.Header.Add(name, v)
		}
	}
	if req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		tb.Fatalf("post %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatalf("read reply: %v", err)
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: b}
}

// headers builds an http.Header from name, value pairs.
func headers(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

// merged returns a copy of a with every value of b added.
func merged(a, b http.Header) http.Header {
	out := a.Clone()
	if out == nil {
		out = http.Header{}
	}
	for name, vals := range b {
		for _, v := range vals {
			out.Add(name, v)
		}
	}
	return out
}

// problemDoc is the RFC 9457 document hookstamp answers with.
type problemDoc struct {
	Type    string `json:"type"`
	Title   string `json:"title"`
	Status  int    `json:"status"`
	Detail  string `json:"detail"`
	Outcome string `json:"outcome"`
}

// wantProblem checks that r is hookstamp's own problem answer with status
// and outcome ("" = a request that never reached a route's decision, such
// as one the HTTP layer could not read), and that it echoes none of the
// forbidden strings (secrets, signatures, request bytes).
func wantProblem(tb testing.TB, r reply, status int, outcome string, forbidden ...string) problemDoc {
	tb.Helper()
	if r.status != status {
		tb.Fatalf("status %d, want %d; body %s", r.status, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		tb.Fatalf("Content-Type %q, want application/problem+json; body %s", ct, r.body)
	}
	if got := r.outcome(); got != outcome {
		tb.Fatalf("Hookstamp-Outcome %q, want %q", got, outcome)
	}
	var p problemDoc
	if err := json.Unmarshal(r.body, &p); err != nil {
		tb.Fatalf("problem body is not JSON: %v: %q", err, r.body)
	}
	if p.Title == "" || p.Detail == "" || p.Status != status || p.Outcome != outcome {
		tb.Fatalf("problem %+v: want title, detail, status %d and outcome %q", p, status, outcome)
	}
	for _, f := range forbidden {
		if f == "" {
			continue
		}
		if bytes.Contains(r.body, []byte(f)) {
			tb.Fatalf("problem body echoes %q: %s", f, r.body)
		}
		for name, vals := range r.header {
			for _, v := range vals {
				if strings.Contains(v, f) {
					tb.Fatalf("response header %s echoes %q", name, f)
				}
			}
		}
	}
	return p
}

// ledgerRows counts the rows of hookstamp_records in the SQLite file at
// path through a connection of its own, so that the count does not depend
// on the ledger code under test.
func ledgerRows(tb testing.TB, path string) int64 {
	tb.Helper()
	db, err := gorm.Open(sqlite.Open(path), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		tb.Fatalf("open %s: %v", path, err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		tb.Fatal(err)
	}
	defer sqlDB.Close()
	var n int64
	if err := db.Table("hookstamp_records").Count(&n).Error; err != nil {
		tb.Fatalf("count hookstamp_records: %v", err)
	}
	return n
}

// rawExchange writes req on a fresh connection and returns every response
// the gateway sent before it closed the connection (or until deadline).
// Each response is its head plus body, as text.
func rawExchange(tb testing.TB, g *Gateway, req string, deadline time.Duration) []rawReply {
	tb.Helper()
	conn, err := net.DialTimeout("tcp", g.Addr(), 5*time.Second)
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(deadline))
	go func() { _, _ = io.WriteString(conn, req) }()
	return readReplies(conn)
}

// rawReply is one response read off a raw connection.
type rawReply struct {
	status int
	header http.Header
	body   []byte
}

func (r rawReply) reply() reply { return reply(r) }

// readReplies reads responses until the connection ends or its deadline
// passes.
func readReplies(conn net.Conn) []rawReply {
	br := bufio.NewReader(conn)
	var out []rawReply
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return out
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		out = append(out, rawReply{status: resp.StatusCode, header: resp.Header, body: b})
	}
}
