package inbox_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/recover"
	"gorm.io/gorm"

	"github.com/hookstamp/hookstamp/inbox"
)

func fiberApp(ib *inbox.Inbox, status *atomic.Int32, runs *atomic.Int32, panics *atomic.Bool) *fiber.App {
	app := fiber.New()
	app.Use(recover.New()) // a panic passed on by the wrapper ends here, as a 500
	app.Post("/pay", ib.Fiber(func(c *fiber.Ctx) error {
		runs.Add(1)
		key := c.Get("Idempotency-Key")
		if err := book(inbox.Tx(c.UserContext()), key); err != nil {
			return err
		}
		if panics.Load() {
			panic("fiber handler bug")
		}
		c.Set("X-Run", "yes")
		c.Type("json")
		return c.Status(int(status.Load())).SendString(`{"booked":"` + key + `"}`)
	}))
	return app
}

func fiberPost(tb testing.TB, app *fiber.App, key string) got {
	tb.Helper()
	req := httptest.NewRequest(http.MethodPost, "/pay", strings.NewReader("{}"))
	req.Header.Set("Idempotency-Key", key)
	resp, err := app.Test(req, 10_000)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return got{resp.StatusCode, resp.Header, string(b)}
}

// The Fiber wrapper: a repeat replays the first answer; a 503 rolls back
// and the next copy runs again; a panic rolls back.
func TestFiberWrapper(t *testing.T) {
	eachBackend(t, func(t *testing.T, db *gorm.DB) {
		var status, runs atomic.Int32
		var panics atomic.Bool
		app := fiberApp(newInbox(t, db, inbox.Options{}), &status, &runs, &panics)

		status.Store(http.StatusAccepted)
		first := fiberPost(t, app, "evt_20")
		again := fiberPost(t, app, "evt_20")
		if first.status != http.StatusAccepted || again.status != first.status || again.body != first.body ||
			again.header.Get("Content-Type") != first.header.Get("Content-Type") || first.header.Get("Content-Type") == "" {
			t.Fatalf("first %d %v %q, repeat %d %v %q: want the same status, Content-Type and body",
				first.status, first.header, first.body, again.status, again.header, again.body)
		}
		if again.header.Get("X-Run") != "" || runs.Load() != 1 {
			t.Fatalf("the repeat ran the handler (runs %d, X-Run %q)", runs.Load(), again.header.Get("X-Run"))
		}
		wantCounts(t, db, inbox.DefaultTable, "evt_20", 1, 1)

		status.Store(http.StatusServiceUnavailable)
		if a := fiberPost(t, app, "evt_21"); a.status != http.StatusServiceUnavailable {
			t.Fatalf("got %d, want the handler's 503", a.status)
		}
		wantCounts(t, db, inbox.DefaultTable, "evt_21", 0, 0)
		status.Store(http.StatusOK)
		if a := fiberPost(t, app, "evt_21"); a.status != http.StatusOK || runs.Load() != 3 {
			t.Fatalf("next copy got %d after %d runs, want 200 from a third run", a.status, runs.Load())
		}
		wantCounts(t, db, inbox.DefaultTable, "evt_21", 1, 1)

		panics.Store(true)
		if a := fiberPost(t, app, "evt_22"); a.status != http.StatusInternalServerError {
			t.Fatalf("a panicking handler: %d %q, want recover's 500", a.status, a.body)
		}
		wantCounts(t, db, inbox.DefaultTable, "evt_22", 0, 0)
		panics.Store(false)
		if a := fiberPost(t, app, "evt_22"); a.status != http.StatusOK {
			t.Fatalf("after the panic: %d %q, want 200", a.status, a.body)
		}
		wantCounts(t, db, inbox.DefaultTable, "evt_22", 1, 1)
	})
}
