package console

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/hookstamp/hookstamp/internal/admin"
)

// ledgerWait is how long a page waits for the ledger, all its queries
// together.
const ledgerWait = 5 * time.Second

// ledgerQueries are one page's queries of the ledger, which may be one a
// route. They share one deadline, and once one fails the rest are not
// asked: each would wait as long again, and a page of many routes would
// outlast the admin listener's write timeout, its answer cut off. What
// they would have shown is unknown, and the page says why (alert).
type ledgerQueries struct {
	ctx context.Context
	c   *Console
	// failed is the first query's failure; nil while all answer.
	failed error
}

// ledgerQueries starts r's page's queries of the ledger; cancel them once
// the page is rendered.
func (c *Console) ledgerQueries(r *http.Request) (*ledgerQueries, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(r.Context(), ledgerWait)
	return &ledgerQueries{ctx: ctx, c: c}, cancel
}

// errNotAsked stands for the answer of a query not asked after another
// failed.
var errNotAsked = &admin.OpError{Status: http.StatusServiceUnavailable, Detail: "unknown: the ledger did not answer"}

// ask runs q, unless a query before it failed (errNotAsked then).
func (lq *ledgerQueries) ask(q func(ctx context.Context) error) error {
	if lq.failed != nil {
		return errNotAsked
	}
	err := q(lq.ctx)
	if err == nil {
		return nil
	}
	lq.failed = err
	var oe *admin.OpError
	if !errors.As(err, &oe) { // an admin operation logs its own failure
		lq.c.o.Logger.ErrorContext(lq.ctx, "console: ledger query failed", "err", err)
	}
	return err
}

// status is the page's: 503 when a query failed.
func (lq *ledgerQueries) status() int {
	if lq.failed != nil {
		return http.StatusServiceUnavailable
	}
	return http.StatusOK
}

// alert is what the page says of a failed query; "" when none failed.
func (lq *ledgerQueries) alert() string {
	if lq.failed == nil {
		return ""
	}
	return "The ledger did not answer: what it holds is shown as unknown on this page, which waits " +
		ledgerWait.String() + " for it at most. Reload the page to ask it again."
}
