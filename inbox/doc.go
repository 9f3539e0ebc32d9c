// Package inbox gives a Go application behind hookstamp exactly-once
// effects: it records each event's key in the same database transaction as
// the application's own business write, so that a second copy of the event
// finds the key and does nothing.
//
// hookstamp forwards each event once, except when a gateway process dies
// mid-forward: the provider's retry then takes the claim over after the
// lease and is forwarded again, with the same Idempotency-Key. An inbox
// closes that gap on the application's side (SPEC §13):
//
//	ib, err := inbox.New(db, inbox.Options{Consumer: "payments"})
//	ran, err := ib.Once(ctx, key, func(tx *gorm.DB) error {
//		return tx.Create(&Payment{EventID: key, Cents: 1200}).Error
//	})
//
// or, for an HTTP handler, ib.Middleware(handler) (net/http) or
// ib.Fiber(handler) (Fiber), where the handler writes through inbox.Tx and
// its answer is recorded with the key and replayed to every repeat. Such a
// handler must answer a non-final status (see Final) when a write the
// event needs fails: on MySQL/MariaDB and SQLite a failed statement leaves
// the transaction open, and a final answer would commit the key without
// the write. A refusal (a final status other than 2xx: 409, the order was
// already paid) may follow a failed statement and is recorded on every
// database; on PostgreSQL, whose failed statement aborts the transaction,
// with the key alone, none of the handler's writes applied. A 2xx may
// not: on PostgreSQL the aborted transaction took the handler's writes
// with it, so the middleware answers 503 and the sender's retry runs the
// handler again. A handler that expects a statement to fail and goes on
// (an insert whose row may be there already) runs it in a savepoint,
// tx.SavePoint(name) and, when it fails, tx.RollbackTo(name).
//
// fn and the handler must also give up when a statement fails, not retry
// it in place: a deadlock on MySQL/MariaDB, or on SQLite a ROLLBACK
// conflict clause or RAISE(ROLLBACK), rolls the whole transaction back,
// key included. The inbox then commits nothing (Once returns
// ErrRolledBack, the middleware answers 503). On MySQL/MariaDB the
// transaction runs on a connection with autocommit off, so what the
// handler wrote after the rollback is rolled back too; SQLite has no such
// setting, and those writes are committed one by one.
//
// # One Inbox per route
//
// hookstamp keeps each route's keys apart: the same key on two routes is
// two events. The inbox knows no routes (the gateway forwards none), so
// each endpoint behind a route of its own needs an Inbox of its own,
// with its own Options.Consumer (or Table); one Inbox shared by two
// endpoints would answer the second event with the first one's answer.
//
// # The unique index decides
//
// The key is inserted first, in the transaction that then runs the
// business write; the table's primary key (consumer, key) decides which of
// two concurrent copies runs. There is no read-then-insert. Copies of one
// key in one process wait in the Inbox, holding no connection, until the
// copy before them has committed or rolled back: a burst of copies of one
// key larger than the connection pool cannot starve the first one's
// transaction. Distinct keys each hold a connection for their
// transaction, so handlers read and write through tx (or Tx): one that
// also took a second connection from the application's own *gorm.DB
// would wait for it forever once as many keys as the pool has
// connections were in flight. Copies in other processes wait in the
// database, each on a connection of its own. How each database makes them wait:
//
//   - PostgreSQL: the second INSERT blocks until the first transaction ends
//     (or until lock_timeout, when the application sets one: that error is
//     returned, not retried). If the first commits, the second fails on the
//     unique index and runs nothing; if it rolls back (the effect failed),
//     the second INSERT succeeds and the second copy runs.
//   - MySQL/MariaDB (InnoDB): the same wait, on the record lock, for up to
//     innodb_lock_wait_timeout (50 s by default), whose error is returned
//     likewise: a retry would wait as long again for the same first copy.
//     When the first rolls back, the waiters can deadlock each other on
//     their insert-intention locks; InnoDB picks a victim, and the inbox
//     retries it (a deadlock reaches the caller only once the context, or
//     about five seconds of retries, allow no other try).
//   - SQLite: one writer at a time. The INSERT is the transaction's first
//     statement, so it waits for the write lock under the connection's
//     busy_timeout; an SQLITE_BUSY that still comes back is retried, for
//     about five seconds in all, then returned.
//
// # What is recorded
//
// A row of the inbox table (hookstamp_inbox unless Options.Table says
// otherwise) holds consumer, key, status, headers, body, created_at and
// expires_at. Once records the key alone (status 0); the middleware records
// the handler's final answer. Rows live for Options.Retention and are then
// deleted by Sweep (or RunSweeper); until it runs, an expired key is still
// honoured.
//
// New creates the table and its index when they are missing (Migrate).
// Once they exist it only looks them up, so the application's database
// user needs no privilege to create tables: a migration role may create
// them first, by calling New or Migrate. A table of an earlier version,
// whose key column holds 255 bytes, is widened by New on PostgreSQL; on
// MySQL/MariaDB, where widening copies the table, only when it is empty:
// call Migrate at a quiet moment (until then longer keys are refused).
package inbox
