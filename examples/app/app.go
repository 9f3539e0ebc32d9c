package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/libtnb/sqlite"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/hookstamp/hookstamp/inbox"
)

// Config says where the application keeps its payments.
type Config struct {
	// Driver is "sqlite" (default) or "postgres".
	Driver string
	// DSN is the SQLite file or the PostgreSQL URL.
	DSN string
}

// Payment is the business write: one row per webhook event.
type Payment struct {
	ID        int64     `gorm:"primaryKey" json:"id"`
	EventID   string    `gorm:"size:255;not null" json:"event_id"`
	Amount    int64     `json:"amount"`
	Currency  string    `gorm:"size:3" json:"currency"`
	CreatedAt time.Time `json:"created_at"`
}

// App is the payments application: its database, its inbox and its HTTP
// routes.
type App struct {
	db  *gorm.DB
	ib  *inbox.Inbox
	log *slog.Logger
	srv *http.Server
}

// New opens the database, creates the payments and inbox tables when
// missing, and builds the routes.
func New(c Config, log *slog.Logger) (*App, error) {
	db, err := open(c)
	if err != nil {
		return nil, err
	}
	a := &App{db: db, log: log}
	if err := db.AutoMigrate(&Payment{}); err != nil {
		a.Close()
		return nil, fmt.Errorf("migrate payments: %w", err)
	}
	if a.ib, err = inbox.New(db, inbox.Options{Consumer: "payments", Logger: log}); err != nil {
		a.Close()
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /demo", a.ib.Middleware(http.HandlerFunc(a.book)))
	mux.HandleFunc("GET /payments", a.list)
	a.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	return a, nil
}

func open(c Config) (*gorm.DB, error) {
	cfg := &gorm.Config{Logger: logger.Discard}
	switch c.Driver {
	case "", "sqlite":
		if dir := filepath.Dir(c.DSN); dir != "." {
			if err := os.MkdirAll(dir, 0o750); err != nil {
				return nil, err
			}
		}
		return gorm.Open(sqlite.Open(c.DSN+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)"), cfg)
	case "postgres":
		return gorm.Open(postgres.Open(c.DSN), cfg)
	}
	return nil, fmt.Errorf("unknown driver %q (want sqlite or postgres)", c.Driver)
}

// Serve serves on ln until ctx is done, sweeping expired inbox keys
// hourly.
func (a *App) Serve(ctx context.Context, ln net.Listener) error {
	go a.ib.RunSweeper(ctx, time.Hour)
	errc := make(chan error, 1)
	go func() { errc <- a.srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return a.srv.Shutdown(sctx)
}

// Close closes the database.
func (a *App) Close() {
	if sqlDB, err := a.db.DB(); err == nil {
		sqlDB.Close()
	}
}

type paymentRequest struct {
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
}

// book books the event's payment inside the inbox's transaction. A body
// that is not a payment is answered 422, which is final: the event is
// recorded as refused and its repeats get the same 422. Whatever the
// database would refuse is checked here, so that a failed write (503,
// retried by the provider) is always a passing fault, never the event.
func (a *App) book(w http.ResponseWriter, r *http.Request) {
	var req paymentRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil || req.Amount <= 0 || !currencyCode(req.Currency) {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"error": "want {\"amount\": positive cents, \"currency\": three letters, default eur}"})
		return
	}
	req.Currency = strings.ToLower(cmp.Or(req.Currency, "eur"))
	p := Payment{EventID: r.Header.Get("Idempotency-Key"), Amount: req.Amount, Currency: req.Currency}
	if err := inbox.Tx(r.Context()).Create(&p).Error; err != nil {
		a.log.Error("book payment", "event", p.EventID, "err", err)
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "try again"}) // not final: rolled back
		return
	}
	a.log.Info("payment booked", "event", p.EventID, "payment", p.ID, "amount", p.Amount)
	writeJSON(w, http.StatusCreated, p)
}

// list answers every payment booked.
func (a *App) list(w http.ResponseWriter, r *http.Request) {
	var ps []Payment
	if err := a.db.WithContext(r.Context()).Order("id").Find(&ps).Error; err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, ps)
}

// currencyCode reports whether c is empty (the default) or three ASCII
// letters, as ISO 4217 codes are and as the payments table's column holds.
func currencyCode(c string) bool {
	if c == "" {
		return true
	}
	if len(c) != 3 {
		return false
	}
	for i := range len(c) {
		if b := c[i] | 0x20; b < 'a' || b > 'z' {
			return false
		}
	}
	return true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"encode"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
