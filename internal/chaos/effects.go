package chaos

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/hookstamp/hookstamp/inbox"
)

// ActAbsorbed: a second copy of an applied event reached the upstream and
// its inbox found the key recorded: no effect, the first copy's answer
// replayed (the -inbox mode).
const ActAbsorbed = "absorbed"

// Effect is one business write of the upstream in the -inbox mode: a
// booking (or a recorded refusal), in the upstream's own database, written
// in the transaction that records the event's key in the inbox.
type Effect struct {
	ID      int64  `gorm:"primaryKey"`
	Route   string `gorm:"not null"`
	Key     string `gorm:"not null"`
	Seq     int64  `gorm:"not null"` // the upstream delivery that applied it
	Gateway string `gorm:"not null"`
	Kind    string `gorm:"not null"` // ActApply or ActDecline
	At      time.Time
}

// TableName is the effects table.
func (Effect) TableName() string { return "chaos_effects" }

// applyTimeout bounds one application of an effect (its database is not
// under faults: only a stuck harness reaches it).
const applyTimeout = 30 * time.Second

// inboxKeyHeader carries the inbox key (route and Idempotency-Key: one key
// may name an event on each route) from the upstream to its middleware.
const inboxKeyHeader = "X-Chaos-Inbox-Key"

// Effects is the application's side of the -inbox mode: a PostgreSQL
// database of its own (not behind the fault proxy: the application's
// database is not under test), the effects table and the inbox.
type Effects struct {
	dbh *Database
	db  *gorm.DB
	ib  *inbox.Inbox
}

// OpenEffects creates the upstream's database on the server of adminDSN.
func OpenEffects(ctx context.Context, adminDSN string) (*Effects, error) {
	dbh, err := CreateDatabase(ctx, adminDSN)
	if err != nil {
		return nil, err
	}
	e := &Effects{dbh: dbh}
	if e.db, err = gorm.Open(postgres.Open(dbh.direct), &gorm.Config{Logger: logger.Discard}); err != nil {
		e.Close(ctx)
		return nil, fmt.Errorf("effects database: %w", err)
	}
	if sqlDB, err := e.db.DB(); err == nil {
		sqlDB.SetMaxOpenConns(32)
	}
	if err := e.db.WithContext(ctx).AutoMigrate(&Effect{}); err != nil {
		e.Close(ctx)
		return nil, fmt.Errorf("effects table: %w", err)
	}
	if e.ib, err = inbox.New(e.db, inbox.Options{Consumer: "chaos-upstream", Header: inboxKeyHeader}); err != nil {
		e.Close(ctx)
		return nil, err
	}
	return e, nil
}

// apply runs rec's effect through the inbox middleware, as an application
// would, and fills rec with what happened: applied (the effect committed
// with the key), absorbed (the key was recorded: the recorded answer), or
// failed (the inbox could not record: 503, nothing applied).
func (e *Effects) apply(r *http.Request, rec *UpRecord) {
	ran := false
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ran = true
		eff := Effect{Route: rec.Route, Key: rec.Key, Seq: rec.Seq, Gateway: rec.Gateway, Kind: rec.Action, At: rec.Time}
		if err := inbox.Tx(r.Context()).Create(&eff).Error; err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		write(w, rec)
	})
	r.Header.Set(inboxKeyHeader, rec.Route+"/"+rec.Key)
	// The application finishes what it began when the gateway hangs up
	// (its timeout, its death): a COMMIT cancelled on the wire would leave
	// unknown whether the effect happened, and the log must know.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), applyTimeout)
	defer cancel()
	rr := httptest.NewRecorder()
	e.ib.Middleware(h).ServeHTTP(rr, r.WithContext(ctx))
	switch {
	case ran && rr.Code == rec.Status:
		// Applied: the effect and the key committed together.
	case ran || rr.Code >= 500:
		rec.Applied, rec.Action, rec.Status, rec.ContentType = false, ActFail, http.StatusServiceUnavailable, "application/json"
		rec.Response = fmt.Appendf(nil, `{"error":"inbox could not apply","delivery":%d}`, rec.Seq)
	default:
		rec.Applied, rec.Action, rec.Status = false, ActAbsorbed, rr.Code
		rec.ContentType, rec.Response = rr.Header().Get("Content-Type"), rr.Body.Bytes()
	}
}

// Read returns every effect applied.
func (e *Effects) Read(ctx context.Context) ([]Effect, error) {
	var out []Effect
	if err := e.db.WithContext(ctx).Order("id").Find(&out).Error; err != nil {
		return nil, fmt.Errorf("read effects: %w", err)
	}
	return out, nil
}

// Close closes the connections and drops the database.
func (e *Effects) Close(ctx context.Context) error {
	if e.db != nil {
		if sqlDB, err := e.db.DB(); err == nil {
			sqlDB.Close()
		}
	}
	return e.dbh.Drop(ctx)
}
