package sqlledger_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/sqlledger"
)

// listAll pages through q and returns the keys in the order served.
func listAll(tb testing.TB, l *sqlledger.Ledger, q idempotency.ListQuery) []string {
	tb.Helper()
	var keys []string
	for pages := 0; ; pages++ {
		if pages > 100 {
			tb.Fatal("List never reached its last page")
		}
		page, err := l.List(context.Background(), q)
		if err != nil {
			tb.Fatalf("List(%+v): %v", q, err)
		}
		if len(page.Records) > q.Limit {
			tb.Fatalf("page of %d records, limit %d", len(page.Records), q.Limit)
		}
		for _, r := range page.Records {
			if r.Body != nil {
				tb.Fatalf("List returned the body of %q", r.Key)
			}
			keys = append(keys, r.Key)
		}
		if page.Next == "" {
			return keys
		}
		q.Cursor = page.Next
	}
}

func TestListPagesNewestFirstWithFilters(t *testing.T) {
	onEachDriver(t, func(t *testing.T, l *sqlledger.Ledger) {
		// Ten done records a minute apart, two of them sharing a time (the
		// key breaks the tie), two held, one on another route.
		for i := range 10 {
			at := t0.Add(time.Duration(i) * time.Minute)
			if i == 5 {
				at = t0.Add(4 * time.Minute)
			}
			k := fmt.Sprintf("evt_%02d", i)
			mustCommit(t, l, doneRecord(ref(k), at, at.Add(time.Hour)), "o", at)
		}
		mustCommit(t, l, heldRecord(ref("held_a"), t0.Add(30*time.Second)), "o", t0)
		mustCommit(t, l, heldRecord(ref("held_b"), t0.Add(90*time.Second)), "o", t0)
		mustCommit(t, l, doneRecord(idempotency.Ref{Route: "other", Key: "evt_x"}, t0, t0.Add(time.Hour)), "o", t0)

		all := listAll(t, l, idempotency.ListQuery{Route: "stripe", Limit: 3})
		want := []string{"evt_09", "evt_08", "evt_07", "evt_06", "evt_05", "evt_04", "evt_03", "evt_02", "held_b", "evt_01", "held_a", "evt_00"}
		if !slices.Equal(all, want) {
			t.Fatalf("pages served %v, want %v", all, want)
		}
		tests := []struct {
			name string
			q    idempotency.ListQuery
			want []string
		}{
			{"state", idempotency.ListQuery{State: idempotency.StateHeld}, []string{"held_b", "held_a"}},
			{"key prefix", idempotency.ListQuery{KeyPrefix: "evt_0", Limit: 2},
				[]string{"evt_09", "evt_08", "evt_07", "evt_06", "evt_05", "evt_04", "evt_03", "evt_02", "evt_01", "evt_00"}},
			{"prefix is case-sensitive", idempotency.ListQuery{KeyPrefix: "EVT"}, nil},
			{"wildcards are literal", idempotency.ListQuery{KeyPrefix: "evt%"}, nil},
			{"underscore is literal", idempotency.ListQuery{KeyPrefix: "held_"}, []string{"held_b", "held_a"}},
			{"since and until", idempotency.ListQuery{Since: t0.Add(2 * time.Minute), Until: t0.Add(5 * time.Minute)},
				[]string{"evt_05", "evt_04", "evt_03", "evt_02"}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				tt.q.Route = "stripe"
				if tt.q.Limit == 0 {
					tt.q.Limit = 50
				}
				if got := listAll(t, l, tt.q); !slices.Equal(got, tt.want) {
					t.Errorf("List = %v, want %v", got, tt.want)
				}
			})
		}
		// A cursor the ledger cannot compare would fail its statement like
		// an outage (503); it is the client's fault (400).
		for _, forged := range []string{"not-a-cursor", `{"t":1,"k":"evt\u0000x"}`, `{"t":1,"k":""}`,
			`{"t":-9223372036854775807,"k":"evt_01"}`, `{"t":9223372036854775807,"k":"evt_01"}`} {
			c := forged
			if forged[0] == '{' {
				c = base64.RawURLEncoding.EncodeToString([]byte(forged))
			}
			_, err := l.List(t.Context(), idempotency.ListQuery{Route: "stripe", Limit: 3, Cursor: c})
			if !errors.Is(err, idempotency.ErrBadCursor) {
				t.Errorf("List with the forged cursor %s: err = %v, want ErrBadCursor", forged, err)
			}
		}
	})
}
