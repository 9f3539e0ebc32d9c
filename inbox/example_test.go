package inbox_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/libtnb/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/hookstamp/hookstamp/inbox"
)

// exampleDB opens a fresh SQLite file with a payments table.
func exampleDB() (db *gorm.DB, cleanup func()) {
	dir, err := os.MkdirTemp("", "inbox-example-")
	if err != nil {
		panic(err)
	}
	db, err = gorm.Open(sqlite.Open(filepath.Join(dir, "app.db")+"?_pragma=busy_timeout(5000)"),
		&gorm.Config{Logger: logger.Discard})
	if err != nil {
		panic(err)
	}
	if err := db.AutoMigrate(&Payment{}); err != nil {
		panic(err)
	}
	return db, func() {
		if sqlDB, err := db.DB(); err == nil {
			sqlDB.Close()
		}
		os.RemoveAll(dir)
	}
}

// Once books a payment and records the event's key in one transaction: the
// second copy of the event books nothing.
func ExampleInbox_Once() {
	db, cleanup := exampleDB()
	defer cleanup()
	ib, err := inbox.New(db, inbox.Options{Consumer: "payments"})
	if err != nil {
		panic(err)
	}
	for i := 0; i < 2; i++ {
		ran, err := ib.Once(context.Background(), "evt_1", func(tx *gorm.DB) error {
			return tx.Create(&Payment{EventID: "evt_1", Cents: 1200}).Error
		})
		fmt.Println("ran:", ran, "err:", err)
	}
	var n int64
	db.Model(&Payment{}).Count(&n)
	fmt.Println("payments:", n)
	// Output:
	// ran: true err: <nil>
	// ran: false err: <nil>
	// payments: 1
}

// The middleware runs the handler inside the transaction (inbox.Tx) and
// answers a repeat with the recorded answer.
func ExampleInbox_Middleware() {
	db, cleanup := exampleDB()
	defer cleanup()
	ib, err := inbox.New(db, inbox.Options{})
	if err != nil {
		panic(err)
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		if err := inbox.Tx(r.Context()).Create(&Payment{EventID: key, Cents: 1200}).Error; err != nil {
			http.Error(w, "try again", http.StatusServiceUnavailable) // not final: rolled back
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"booked":%q}`, key)
	})
	srv := httptest.NewServer(ib.Middleware(handler))
	defer srv.Close()
	for i := 0; i < 2; i++ {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(`{"amount":1200}`))
		req.Header.Set("Idempotency-Key", "evt_7")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, string(body))
	}
	var n int64
	db.Model(&Payment{}).Count(&n)
	fmt.Println("payments:", n)
	// Output:
	// 200 {"booked":"evt_7"}
	// 200 {"booked":"evt_7"}
	// payments: 1
}

// A sweeper deletes keys older than Options.Retention.
func ExampleInbox_RunSweeper() {
	db, cleanup := exampleDB()
	defer cleanup()
	ib, err := inbox.New(db, inbox.Options{Retention: 7 * 24 * time.Hour})
	if err != nil {
		panic(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go ib.RunSweeper(ctx, time.Hour)
	fmt.Println("sweeping hourly")
	// Output: sweeping hourly
}

// The Fiber wrapper: the handler writes through inbox.Tx(c.UserContext()).
func ExampleInbox_Fiber() {
	db, cleanup := exampleDB()
	defer cleanup()
	ib, err := inbox.New(db, inbox.Options{})
	if err != nil {
		panic(err)
	}
	app := fiber.New()
	app.Post("/pay", ib.Fiber(func(c *fiber.Ctx) error {
		key := c.Get("Idempotency-Key")
		if err := inbox.Tx(c.UserContext()).Create(&Payment{EventID: key, Cents: 1200}).Error; err != nil {
			return err // rolled back; Fiber's error handler answers
		}
		return c.Status(fiber.StatusCreated).JSON(fiber.Map{"booked": key})
	}))
	for i := 0; i < 2; i++ {
		req := httptest.NewRequest(http.MethodPost, "/pay", strings.NewReader(`{"amount":1200}`))
		req.Header.Set("Idempotency-Key", "evt_9")
		resp, err := app.Test(req)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		fmt.Println(resp.StatusCode, string(body))
	}
	// Output:
	// 201 {"booked":"evt_9"}
	// 201 {"booked":"evt_9"}
}
