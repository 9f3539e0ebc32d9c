package admin

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// setState makes ref's row state, acked as given, as the queue and an
// async intake write them.
func (e *env) setState(tb testing.TB, ref idempotency.Ref, state idempotency.State, acked bool) {
	tb.Helper()
	db, err := e.ledger.DB()
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := db.ExecContext(context.Background(), `UPDATE hookstamp_records SET state = ?, acked = ? WHERE route = ? AND "key" = ?`,
		string(state), acked, ref.Route, ref.Key); err != nil {
		tb.Fatal(err)
	}
}

// A record whose provider was acknowledged and whose upstream has not
// taken it is the only copy of its event: a DELETE refuses it, saying
// what to do instead, unless the operator says ?discard=true.
func TestDeleteOfAnAcknowledgedUndeliveredRecordNeedsDiscard(t *testing.T) {
	tests := []struct {
		state   idempotency.State
		instead string
	}{
		{idempotency.StateQueued, "Wait for the queue"},
		{idempotency.StateDead, "redrive it"},
		{idempotency.StateHeld, `"action":"release"`},
	}
	for _, tc := range tests {
		t.Run(string(tc.state), func(t *testing.T) {
			e := newEnv(t, nil)
			ref := idempotency.Ref{Route: "pay", Key: "evt_" + string(tc.state)}
			e.commit(t, &idempotency.Record{Ref: ref, State: idempotency.StateDone, Response: idempotency.Response{Status: 200}})
			e.setState(t, ref, tc.state, true)

			r := e.do(t, http.MethodDelete, recordPath("pay", ref.Key), token, "")
			wantProblem(t, r, http.StatusConflict)
			if p := decode[problemDoc](t, r); !strings.Contains(p.Detail, tc.instead) || !strings.Contains(p.Detail, "?discard=true") {
				t.Errorf("409 detail %q does not say %q and ?discard=true", p.Detail, tc.instead)
			}
			if rec, err := e.ledger.Lookup(context.Background(), ref); err != nil || rec.State != tc.state {
				t.Fatalf("after the refused DELETE the record is %v (%v), want it %s", rec, err, tc.state)
			}
			if got := decode[Record](t, e.do(t, http.MethodGet, recordPath("pay", ref.Key), token, "")); !got.Acked {
				t.Errorf("GET says acked false")
			}

			wantProblem(t, e.do(t, http.MethodDelete, recordPath("pay", ref.Key)+"?discard=maybe", token, ""), http.StatusBadRequest)
			if r := e.do(t, http.MethodDelete, recordPath("pay", ref.Key)+"?discard=true", token, ""); r.status != http.StatusNoContent {
				t.Fatalf("DELETE ?discard=true: %d %s, want 204", r.status, r.body)
			}
			if _, err := e.ledger.Lookup(context.Background(), ref); err == nil {
				t.Fatal("the record survived DELETE ?discard=true")
			}
		})
	}
}

// A done record's event reached the upstream, acknowledged or not: a
// DELETE needs no discard.
func TestDeleteOfADoneAcknowledgedRecordNeedsNoDiscard(t *testing.T) {
	e := newEnv(t, nil)
	ref := idempotency.Ref{Route: "pay", Key: "evt_done"}
	e.commit(t, &idempotency.Record{Ref: ref, State: idempotency.StateDone, Response: idempotency.Response{Status: 200}})
	e.setState(t, ref, idempotency.StateDone, true)
	if r := e.do(t, http.MethodDelete, recordPath("pay", ref.Key), token, ""); r.status != http.StatusNoContent {
		t.Fatalf("DELETE of a done record: %d %s, want 204", r.status, r.body)
	}
}
