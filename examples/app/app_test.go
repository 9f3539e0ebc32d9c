package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hookstamp/hookstamp/internal/config"
	"github.com/hookstamp/hookstamp/internal/gateway"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// startApp runs the application on a free loopback port until the test ends.
func startApp(tb testing.TB, c Config) (*App, string) {
	tb.Helper()
	a, err := New(c, slog.New(slog.DiscardHandler))
	if err != nil {
		tb.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Serve(ctx, ln) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("app: %v", err)
		}
		a.Close()
	})
	return a, "http://" + ln.Addr().String()
}

// startGateway runs the gateway of make run (config.yaml) in front of the
// application: its own SQLite ledger, listeners on free ports.
func startGateway(tb testing.TB, appURL string) string {
	tb.Helper()
	raw, err := os.ReadFile("../../config.yaml")
	if err != nil {
		tb.Fatal(err)
	}
	y := string(raw)
	for old, new := range map[string]string{
		`listen: ":8080"`:                 `listen: "127.0.0.1:0"`,
		`listen: "127.0.0.1:9090"`:        `listen: ""`,
		`dsn: "data/hookstamp.db"`:        `dsn: "` + filepath.Join(tb.TempDir(), "hookstamp.db") + `"`,
		`url: http://127.0.0.1:9000/demo`: `url: ` + appURL + `/demo`,
	} {
		if !strings.Contains(y, old) {
			tb.Fatalf("config.yaml no longer contains %q", old)
		}
		y = strings.Replace(y, old, new, 1)
	}
	cfg, err := config.LoadFromBytes([]byte(y), nil)
	if err != nil {
		tb.Fatal(err)
	}
	g, err := gateway.New(context.Background(), cfg, gateway.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		tb.Fatal(err)
	}
	if err := g.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := g.Shutdown(context.Background()); err != nil {
			tb.Errorf("gateway shutdown: %v", err)
		}
	})
	return g.URL()
}

type answer struct {
	status int
	body   string
}

func send(tb testing.TB, url string, header map[string]string, body string) answer {
	tb.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, string(b)}
}

func payments(tb testing.TB, appURL string) []Payment {
	tb.Helper()
	resp, err := http.Get(appURL + "/payments")
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	var ps []Payment
	if err := json.NewDecoder(resp.Body).Decode(&ps); err != nil {
		tb.Fatal(err)
	}
	return ps
}

// Behind the gateway of make run: repeats are replayed by the gateway;
// the second copy a gateway killed mid-forward would send (same
// Idempotency-Key, straight to the application) is absorbed by the inbox.
// Each event is booked once.
func TestAppBehindGateway(t *testing.T) {
	_, appURL := startApp(t, Config{Driver: "sqlite", DSN: filepath.Join(t.TempDir(), "payments.db")})
	gw := startGateway(t, appURL)
	event := map[string]string{"X-Event-Id": "evt_1", "Content-Type": "application/json"}
	first := send(t, gw+"/webhooks/demo", event, `{"amount":1200,"currency":"eur"}`)
	if first.status != http.StatusCreated {
		t.Fatalf("first delivery: %d %q, want 201", first.status, first.body)
	}
	if again := send(t, gw+"/webhooks/demo", event, `{"amount":1200,"currency":"eur"}`); again != first {
		t.Errorf("repeat through the gateway: %v, want %v", again, first)
	}
	ps := payments(t, appURL)
	if len(ps) != 1 {
		t.Fatalf("%d payments booked, want 1: %+v", len(ps), ps)
	}
	// A lease takeover's second copy: forwarded again with the same key.
	takeover := send(t, appURL+"/demo", map[string]string{"Idempotency-Key": ps[0].EventID}, `{"amount":1200,"currency":"eur"}`)
	if takeover != first {
		t.Errorf("second copy at the application: %v, want the first answer %v", takeover, first)
	}
	if ps := payments(t, appURL); len(ps) != 1 {
		t.Errorf("%d payments after the second copy, want 1", len(ps))
	}
	other := send(t, gw+"/webhooks/demo", map[string]string{"X-Event-Id": "evt_2"}, `{"amount":500}`)
	if other.status != http.StatusCreated || len(payments(t, appURL)) != 2 {
		t.Errorf("a second event: %v, %d payments; want 201 and 2", other, len(payments(t, appURL)))
	}
}

// On PostgreSQL, and with a body that is not a payment: the refusal is
// final and replayed, nothing is booked.
func TestAppOnPostgres(t *testing.T) {
	_, appURL := startApp(t, Config{Driver: "postgres", DSN: testenv.Postgres(t)})
	key := map[string]string{"Idempotency-Key": "evt_3"}
	bad := send(t, appURL+"/demo", key, `{"amount":-1}`)
	if bad.status != http.StatusUnprocessableEntity {
		t.Fatalf("a negative amount: %v, want 422", bad)
	}
	if again := send(t, appURL+"/demo", key, `{"amount":700}`); again != bad {
		t.Errorf("the refused event again: %v, want the recorded %v", again, bad)
	}
	// PostgreSQL would refuse the row (varchar(3)); the event is refused
	// for good, not answered 503 and retried by the provider forever.
	long := map[string]string{"Idempotency-Key": "evt_5"}
	if cur := send(t, appURL+"/demo", long, `{"amount":5,"currency":"euro"}`); cur.status != http.StatusUnprocessableEntity {
		t.Errorf("a four-letter currency: %v, want 422", cur)
	} else if again := send(t, appURL+"/demo", long, `{"amount":5,"currency":"euro"}`); again != cur {
		t.Errorf("the refused currency again: %v, want the recorded %v", again, cur)
	}
	if ok := send(t, appURL+"/demo", map[string]string{"Idempotency-Key": "evt_4"}, `{"amount":700,"currency":"USD"}`); ok.status != http.StatusCreated {
		t.Errorf("a payment: %v, want 201", ok)
	}
	if ps := payments(t, appURL); len(ps) != 1 || ps[0].EventID != "evt_4" || ps[0].Amount != 700 || ps[0].Currency != "usd" {
		t.Errorf("payments %+v, want evt_4's alone, in usd", ps)
	}
}
