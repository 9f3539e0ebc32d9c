package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/hookstamp/hookstamp/inbox"
)

// payments is the handler of the middleware tests: it books a payment per
// event through inbox.Tx and answers as status says.
type payments struct {
	runs   atomic.Int32
	status atomic.Int32 // 0: 201
	panics atomic.Bool
}

func (p *payments) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := p.runs.Add(1)
	key := r.Header.Get("Idempotency-Key")
	if err := book(inbox.Tx(r.Context()), key); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if p.panics.Load() {
		panic("payments handler bug")
	}
	status := int(p.status.Load())
	if status == 0 {
		status = http.StatusCreated
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("X-Run", fmt.Sprint(n)) // not among Options.Headers: not replayed
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"booked":%q,"run":%d}`+"\n\x00\xff", key, n)
}

type got struct {
	status int
	header http.Header
	body   string
}

func post(tb testing.TB, url, key string) got {
	tb.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"amount":1200}`))
	if err != nil {
		tb.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return got{resp.StatusCode, resp.Header, string(b)}
}

// A repeat gets the first answer byte for byte (status, recorded headers,
// body), and the handler never sees it: one payment.
func TestMiddlewareReplaysFirstAnswer(t *testing.T) {
	eachBackend(t, func(t *testing.T, db *gorm.DB) {
		h := &payments{}
		srv := httptest.NewServer(newInbox(t, db, inbox.Options{}).Middleware(h))
		defer srv.Close()
		first := post(t, srv.URL, "evt_10")
		if first.status != http.StatusCreated || first.header.Get("X-Run") != "1" {
			t.Fatalf("first answer %d %v, want the handler's 201", first.status, first.header)
		}
		for i := 0; i < 3; i++ {
			again := post(t, srv.URL, "evt_10")
			if again.status != first.status || again.body != first.body ||
				again.header.Get("Content-Type") != first.header.Get("Content-Type") {
				t.Fatalf("repeat got %d %q %q, want %d %q %q", again.status, again.header.Get("Content-Type"), again.body,
					first.status, first.header.Get("Content-Type"), first.body)
			}
			if again.header.Get("X-Run") != "" {
				t.Errorf("a header outside Options.Headers was replayed: X-Run %q", again.header.Get("X-Run"))
			}
		}
		if n := h.runs.Load(); n != 1 {
			t.Errorf("the handler ran %d times, want 1", n)
		}
		wantCounts(t, db, inbox.DefaultTable, "evt_10", 1, 1)
	})
}

// A recorded header whose value is not UTF-8 (a Latin-1 file name) comes
// back to a repeat byte for byte, as JSON alone would not bring it.
func TestMiddlewareReplaysHeaderBytes(t *testing.T) {
	eachBackend(t, func(t *testing.T, db *gorm.DB) {
		const disposition = "attachment; filename=caf\xe9.txt"
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header()["Content-Disposition"] = []string{disposition, "inline"}
			w.WriteHeader(http.StatusCreated)
		})
		mw := newInbox(t, db, inbox.Options{Headers: []string{"Content-Disposition"}}).Middleware(h)
		for i := range 2 {
			req := httptest.NewRequest(http.MethodPost, "/", nil)
			req.Header.Set("Idempotency-Key", "evt_latin1")
			rec := httptest.NewRecorder()
			mw.ServeHTTP(rec, req)
			if got := rec.Header()["Content-Disposition"]; rec.Code != http.StatusCreated || len(got) != 2 || got[0] != disposition || got[1] != "inline" {
				t.Fatalf("answer %d: %d %q, want 201 [%q inline]", i, rec.Code, got, disposition)
			}
		}
	})
}

// A handler that sends no Content-Type (net/http's nil value, which turns
// sniffing off) has none sent to a repeat either, on the wire: the replay
// went out sniffed as text/html.
func TestMiddlewareReplaysNoContentType(t *testing.T) {
	db := backends[2].open(t)
	srv := httptest.NewServer(newInbox(t, db, inbox.Options{Headers: []string{"Content-Type", "X-Note"}}).Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Type"] = nil
		w.Header().Set("X-Note", "caf\xe9") // recorded too: the headers go as bytes
		io.WriteString(w, "<html>hello</html>")
	})))
	defer srv.Close()
	for i := range 2 {
		if a := post(t, srv.URL, "evt_15"); a.status != http.StatusOK || a.header["Content-Type"] != nil {
			t.Errorf("answer %d: %d with Content-Type %q, want 200 with none", i+1, a.status, a.header["Content-Type"])
		}
	}
}

// Once called from a middleware handler with the key the middleware holds
// would wait for the handler's own transaction: it is refused at once.
func TestOnceInsideItsOwnKeysHandlerIsRefused(t *testing.T) {
	eachBackend(t, func(t *testing.T, db *gorm.DB) {
		ib := newInbox(t, db, inbox.Options{})
		var onceErr error
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
			defer cancel()
			_, onceErr = ib.Once(ctx, r.Header.Get("Idempotency-Key"), func(*gorm.DB) error { return nil })
			w.WriteHeader(http.StatusServiceUnavailable)
		})
		req := httptest.NewRequest(http.MethodPost, "/", nil)
		req.Header.Set("Idempotency-Key", "evt_nested")
		ib.Middleware(h).ServeHTTP(httptest.NewRecorder(), req)
		if !errors.Is(onceErr, inbox.ErrHeldByHandler) {
			t.Fatalf("Once inside its key's handler: %v, want ErrHeldByHandler", onceErr)
		}
	})
}

// Concurrent copies of one event: the handler runs once and every copy
// gets its answer.
func TestMiddlewareConcurrentCopies(t *testing.T) {
	eachBackend(t, func(t *testing.T, db *gorm.DB) {
		// A pool smaller than the burst, and a handler that also reads
		// through the application's own handle (a second connection):
		// waiting copies must not hold the connections it needs. A stuck
		// burst ends with the timeout handler's 503.
		sqlDB, err := db.DB()
		if err != nil {
			t.Fatal(err)
		}
		sqlDB.SetMaxOpenConns(4)
		h := &payments{}
		reads := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var n int64
			if err := db.WithContext(r.Context()).Model(&Payment{}).Count(&n).Error; err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			h.ServeHTTP(w, r)
		})
		srv := httptest.NewServer(http.TimeoutHandler(newInbox(t, db, inbox.Options{}).Middleware(reads), 20*time.Second, "stuck"))
		defer srv.Close()
		const copies = 30
		answers := make(chan got, copies)
		var wg sync.WaitGroup
		for i := 0; i < copies; i++ {
			wg.Add(1)
			go func() { defer wg.Done(); answers <- post(t, srv.URL, "evt_11") }()
		}
		wg.Wait()
		close(answers)
		want := fmt.Sprintf(`{"booked":%q,"run":1}`+"\n\x00\xff", "evt_11")
		for a := range answers {
			if a.status != http.StatusCreated || a.body != want {
				t.Errorf("a copy got %d %q, want 201 %q", a.status, a.body, want)
			}
		}
		if n := h.runs.Load(); n != 1 {
			t.Errorf("the handler ran %d times, want 1", n)
		}
		wantCounts(t, db, inbox.DefaultTable, "evt_11", 1, 1)
	})
}

// A non-final answer (503) is passed on and rolls back: nothing recorded,
// and the next copy runs the handler again.
func TestMiddlewareNonFinalRollsBack(t *testing.T) {
	eachBackend(t, func(t *testing.T, db *gorm.DB) {
		h := &payments{}
		h.status.Store(http.StatusServiceUnavailable)
		srv := httptest.NewServer(newInbox(t, db, inbox.Options{}).Middleware(h))
		defer srv.Close()
		if a := post(t, srv.URL, "evt_12"); a.status != http.StatusServiceUnavailable || !strings.Contains(a.body, `"run":1`) {
			t.Fatalf("got %d %q, want the handler's own 503", a.status, a.body)
		}
		wantCounts(t, db, inbox.DefaultTable, "evt_12", 0, 0)
		h.status.Store(http.StatusOK)
		if a := post(t, srv.URL, "evt_12"); a.status != http.StatusOK || !strings.Contains(a.body, `"run":2`) {
			t.Fatalf("next copy got %d %q, want the handler's 200 from a second run", a.status, a.body)
		}
		wantCounts(t, db, inbox.DefaultTable, "evt_12", 1, 1)
	})
}

// A handler whose write fails and that answers a final 409 (the order was
// already paid) has its 409 recorded and replayed on every database. On
// PostgreSQL the failed INSERT aborts the transaction, so the answer is
// recorded in one of its own; it was 503 for ever, each retry failing alike.
func TestMiddlewareFinalAnswerAfterAFailedStatement(t *testing.T) {
	eachBackend(t, func(t *testing.T, db *gorm.DB) {
		mustExec(t, db, "CREATE UNIQUE INDEX payments_event_id ON payments (event_id)")
		if err := book(db, "order_42"); err != nil {
			t.Fatal(err)
		}
		var runs atomic.Int32
		srv := httptest.NewServer(newInbox(t, db, inbox.Options{}).Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			if err := book(inbox.Tx(r.Context()), "order_42"); err != nil {
				http.Error(w, "order already paid", http.StatusConflict)
				return
			}
			w.WriteHeader(http.StatusCreated)
		})))
		defer srv.Close()
		for i := range 3 {
			if a := post(t, srv.URL, "evt_14"); a.status != http.StatusConflict || a.body != "order already paid\n" {
				t.Fatalf("copy %d: %d %q, want the handler's 409", i+1, a.status, a.body)
			}
		}
		if n := runs.Load(); n != 1 {
			t.Errorf("the handler ran %d times, want once", n)
		}
		wantCounts(t, db, inbox.DefaultTable, "order_42", 1, 0)
		wantCounts(t, db, inbox.DefaultTable, "evt_14", 0, 1)
	})
}

// A handler that books the payment, then meets a failed statement it
// takes for "already there" and answers 200, applied the event on every
// database but PostgreSQL, where the failure aborted the transaction and
// the booking with it: the 200 was recorded alone, and every retry was
// replayed 200 with no payment ever booked. Such a 2xx is now answered
// 503 (not final), with nothing committed, so that the sender retries;
// a handler that goes on after a failed statement wraps it in a
// savepoint, and its 200 is recorded with the booking.
func TestMiddlewareSuccessAfterAnAbortedTransaction(t *testing.T) {
	for _, tc := range []struct {
		name   string
		notify func(tx *gorm.DB, key string) // the statement that fails: the notice was sent before
		want   []int                         // the two copies' statuses
		runs   int32
		booked int64 // payments and inbox rows of the key
	}{
		{"statement alone", func(tx *gorm.DB, key string) {
			_ = tx.Exec("INSERT INTO notices VALUES (?)", key).Error
		}, []int{http.StatusServiceUnavailable, http.StatusServiceUnavailable}, 2, 0},
		{"in a savepoint", func(tx *gorm.DB, key string) {
			tx.SavePoint("notice")
			if tx.Exec("INSERT INTO notices VALUES (?)", key).Error != nil {
				tx.RollbackTo("notice")
			}
		}, []int{http.StatusOK, http.StatusOK}, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := backends[0].open(t) // postgres
			mustExec(t, db, "CREATE TABLE notices (event_id TEXT PRIMARY KEY)")
			mustExec(t, db, "INSERT INTO notices VALUES ('evt_15')")
			var runs atomic.Int32
			srv := httptest.NewServer(newInbox(t, db, inbox.Options{}).Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				runs.Add(1)
				tx, key := inbox.Tx(r.Context()), r.Header.Get("Idempotency-Key")
				if err := book(tx, key); err != nil {
					http.Error(w, "try again", http.StatusServiceUnavailable)
					return
				}
				tc.notify(tx, key)
				w.WriteHeader(http.StatusOK)
			})))
			defer srv.Close()
			for i, want := range tc.want {
				if a := post(t, srv.URL, "evt_15"); a.status != want {
					t.Fatalf("copy %d: %d %q, want %d", i+1, a.status, a.body, want)
				}
			}
			if n := runs.Load(); n != tc.runs {
				t.Errorf("the handler ran %d times, want %d", n, tc.runs)
			}
			wantCounts(t, db, inbox.DefaultTable, "evt_15", tc.booked, tc.booked)
		})
	}
}

// A panicking handler rolls back and the panic goes on to the server.
func TestMiddlewarePanicRollsBack(t *testing.T) {
	eachBackend(t, func(t *testing.T, db *gorm.DB) {
		h := &payments{}
		h.panics.Store(true)
		mw := newInbox(t, db, inbox.Options{}).Middleware(h)
		recovered := func() (v any) {
			defer func() { v = recover() }()
			req := httptest.NewRequest(http.MethodPost, "/pay", strings.NewReader("{}"))
			req.Header.Set("Idempotency-Key", "evt_13")
			mw.ServeHTTP(httptest.NewRecorder(), req)
			return nil
		}()
		if recovered != "payments handler bug" {
			t.Fatalf("recovered %v, want the handler's panic", recovered)
		}
		wantCounts(t, db, inbox.DefaultTable, "evt_13", 0, 0)
		h.panics.Store(false)
		srv := httptest.NewServer(mw)
		defer srv.Close()
		if a := post(t, srv.URL, "evt_13"); a.status != http.StatusCreated {
			t.Fatalf("after the panic got %d %q, want 201", a.status, a.body)
		}
		wantCounts(t, db, inbox.DefaultTable, "evt_13", 1, 1)
	})
}

// A request without a key, or with one the table must not hold, gets 400
// and never reaches the handler.
func TestMiddlewareWithoutKey(t *testing.T) {
	db := backends[2].open(t)
	h := &payments{}
	srv := httptest.NewServer(newInbox(t, db, inbox.Options{}).Middleware(h))
	defer srv.Close()
	if a := post(t, srv.URL, ""); a.status != http.StatusBadRequest {
		t.Errorf("no key: %d %q, want 400", a.status, a.body)
	}
	for _, key := range []string{"evt_\xff", "evt\u2028"} {
		if a := post(t, srv.URL, key); a.status != http.StatusBadRequest {
			t.Errorf("key %q: %d %q, want 400", key, a.status, a.body)
		}
	}
	if h.runs.Load() != 0 {
		t.Error("the handler ran without a valid key")
	}
}
