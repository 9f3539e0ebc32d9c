package idempotency_test

import (
	"bytes"
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/sqlledger"
)

// gatedLookupLedger holds the first two lookups once armed until both
// have arrived, then lets the first through and the second only when
// second is closed.
type gatedLookupLedger struct {
	*sqlledger.Ledger
	armed   atomic.Bool
	n       atomic.Int64
	both    chan struct{} // closed when the second lookup arrives
	second  chan struct{} // the second lookup goes on once closed
	arrived sync.Once
}

func (l *gatedLookupLedger) Lookup(ctx context.Context, r idempotency.Ref) (*idempotency.Record, error) {
	if l.armed.Load() {
		switch l.n.Add(1) {
		case 1:
			<-l.both
		case 2:
			l.arrived.Do(func() { close(l.both) })
			<-l.second
		}
	}
	return l.Ledger.Lookup(ctx, r)
}

// A done screen entry whose body only the ledger kept outlives the ledger
// row when record.retention is shorter than screen.ttl: the sweeper
// deletes the row, and the repeats that then find the entry claim the key
// afresh (the record's lifetime is over). Two such repeats at two
// replicas: the first drops the screen's entry, claims the key and
// forwards; the second, which read the same entry, must then meet that
// claim — not wipe it from the screen with an operator's Forget and
// forward a second copy beside it. Screen claims confirmed by a ledger
// lookup (screen.on_unavailable: reject, or pass).
func TestRepeatsOfASweptRecordForwardOnce(t *testing.T) {
	ctx := context.Background()
	pg, s := productionStores(t) // MaxCachedBody 64 KiB
	l := &gatedLookupLedger{Ledger: pg, both: make(chan struct{}), second: make(chan struct{})}
	replica := func() *idempotency.Engine {
		e := newEngine(t, idempotency.Options{Screen: s, Ledger: l, ScreenUnavailable: idempotency.FailReject})
		return e
	}
	a, b := replica(), replica()
	big := bytes.Repeat([]byte("s"), 100<<10) // larger than max_cached_body: the screen keeps no body
	var forwards atomic.Int64
	forwarding := make(chan struct{})
	another := make(chan struct{})
	fwd := func(context.Context) (*idempotency.Upstream, error) {
		switch forwards.Add(1) {
		case 2: // the first repeat, claimed afresh: in flight a while
			close(forwarding)
			select {
			case <-another:
			case <-time.After(300 * time.Millisecond):
			}
		case 3:
			close(another)
		}
		return &idempotency.Upstream{Status: 200, Header: http.Header{}, Body: big}, nil
	}
	p := *racePolicy // retention 1h
	p.WaitTimeout = 5 * time.Second
	d := idempotency.Delivery{Ref: idempotency.Ref{Route: "r", Key: "evt_swept"}}
	if r := a.Handle(ctx, &p, d, fwd); r.Outcome != idempotency.Forwarded {
		t.Fatalf("first delivery: %s (%v)", r.Outcome, r.Err)
	}
	// Retention is over: the sweeper deletes the row; the screen keeps
	// its entry for screen.ttl.
	if n, err := pg.Sweep(ctx, time.Now().Add(2*p.Retention), 0); err != nil || n != 1 {
		t.Fatalf("sweep: %d rows, %v", n, err)
	}
	l.armed.Store(true)
	go func() {
		<-forwarding // the first repeat holds its fresh claim
		close(l.second)
	}()
	var wg sync.WaitGroup
	results := make([]idempotency.Result, 2)
	for i, e := range []*idempotency.Engine{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = e.Handle(ctx, &p, d, fwd)
		}()
	}
	wg.Wait()
	if n := forwards.Load(); n != 2 {
		t.Fatalf("upstream received %d copies, want 2 (the first delivery, and one after the sweep); outcomes %s and %s",
			n, results[0].Outcome, results[1].Outcome)
	}
	for _, r := range results {
		if r.Outcome != idempotency.Forwarded && (r.Outcome != idempotency.Replayed || !bytes.Equal(r.Replay.Body, big)) {
			t.Fatalf("repeat after the sweep: %s (%v), want forwarded or a replay of the answer", r.Outcome, r.Err)
		}
	}
}
