package sqlledger

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/gorm"
	"gorm.io/gorm/schema"
)

// On PostgreSQL a migration builds the indexes of tables that already
// exist with CREATE INDEX CONCURRENTLY, outside any transaction: a plain
// CREATE INDEX holds off every write to the ledger until it is built,
// seconds on a ledger of millions of rows, while replicas still serve.
// A concurrent build that fails (a process killed, a deadline) leaves an
// invalid index behind, which the next migration rebuilds.

// models are the ledger's tables, in the order they are migrated.
var models = []any{&recordRow{}, &attemptRow{}, &metaRow{}}

// indexState is what the catalog says of an index a model defines.
type indexState int

const (
	indexMissing indexState = iota
	indexValid
	// indexBuilding: invalid while another process holds the table's
	// ShareUpdateExclusiveLock, which a concurrent build (or a VACUUM)
	// keeps until it is done.
	indexBuilding
	// indexBroken: invalid, and no one is building it.
	indexBroken
)

// addColumns adds the columns the models define and existing tables lack,
// so that the indexes on them can be built before AutoMigrate, which would
// build them inside its transaction.
func addColumns(tx *gorm.DB) error {
	m := tx.Migrator()
	for _, model := range models {
		if !m.HasTable(model) {
			continue
		}
		stmt := &gorm.Statement{DB: tx}
		if err := stmt.Parse(model); err != nil {
			return err
		}
		for _, f := range stmt.Schema.Fields {
			if f.DBName == "" || m.HasColumn(model, f.DBName) {
				continue
			}
			if err := m.AddColumn(model, f.Name); err != nil {
				return err
			}
		}
	}
	return nil
}

// buildIndexes builds, concurrently, the indexes the models define on
// tables that exist, rebuilds invalid ones, drops retired ones, and waits
// for builds other processes have under way; a table not yet made is left
// to AutoMigrate.
func (l *Ledger) buildIndexes(ctx context.Context) error {
	for _, model := range models {
		stmt := &gorm.Statement{DB: l.w}
		if err := stmt.Parse(model); err != nil {
			return err
		}
		if err := l.buildTableIndexes(ctx, stmt); err != nil {
			return err
		}
	}
	return nil
}

func (l *Ledger) buildTableIndexes(ctx context.Context, stmt *gorm.Statement) error {
	table := stmt.Schema.Table
	var waited func()
	defer func() {
		if waited != nil {
			waited()
		}
	}()
	for {
		states, exists, err := l.indexStates(ctx, table)
		if err != nil || !exists {
			return err
		}
		busy, acted := false, false
		for _, idx := range stmt.Schema.ParseIndexes() {
			switch states[idx.Name] {
			case indexValid:
				continue
			case indexBuilding:
				busy = true
				continue
			}
			acted = true
			if states[idx.Name] == indexBroken {
				if err := l.concurrently(ctx, "DROP INDEX CONCURRENTLY IF EXISTS "+quoteIdent(idx.Name), &busy); err != nil {
					return fmt.Errorf("drop invalid index %s: %w", idx.Name, err)
				}
			}
			if err := l.concurrently(ctx, createIndexSQL(table, idx.Name, idx.Where, idx.Fields), &busy); err != nil {
				return fmt.Errorf("create index %s: %w", idx.Name, err)
			}
		}
		// Not while another build is under way: the drop and the build
		// would wait for each other (concurrently), and a retired index is
		// to go only once the index that replaces it is usable.
		if table == TableName && !busy {
			for _, name := range retiredIndexes {
				if _, ok := states[name]; ok {
					acted = true
					if err := l.concurrently(ctx, "DROP INDEX CONCURRENTLY IF EXISTS "+quoteIdent(name), &busy); err != nil {
						return fmt.Errorf("drop retired index %s: %w", name, err)
					}
				}
			}
		}
		switch {
		case !busy && !acted:
			return nil
		case !busy: // read the catalog again: another process may have started a build meanwhile
			continue
		}
		if waited == nil {
			waited = l.NoteWait(table + " indexes")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(100+rand.IntN(200)) * time.Millisecond):
		}
	}
}

// indexStates reads the catalog's view of table's indexes; exists is false
// when the table is not there.
func (l *Ledger) indexStates(ctx context.Context, table string) (states map[string]indexState, exists bool, err error) {
	rows, err := l.w.WithContext(ctx).Raw(indexStatesSQL, table).Rows()
	if err != nil {
		return nil, false, err
	}
	defer rows.Close()
	states = map[string]indexState{}
	for rows.Next() {
		var (
			name         *string
			valid, other bool
		)
		if err := rows.Scan(&name, &valid, &other); err != nil {
			return nil, false, err
		}
		exists = true
		switch {
		case name == nil: // the table, without indexes
		case valid:
			states[*name] = indexValid
		case other:
			states[*name] = indexBuilding
		default:
			states[*name] = indexBroken
		}
	}
	return states, exists, rows.Err()
}

// indexStatesSQL: one row per index of the table in the current schema,
// or one row of NULLs for a table without any; no row without the table.
const indexStatesSQL = `SELECT c.relname, COALESCE(i.indisvalid, false), EXISTS (` +
	`SELECT 1 FROM pg_locks k WHERE k.locktype = 'relation' AND k.relation = t.oid ` +
	`AND k.mode = 'ShareUpdateExclusiveLock' AND k.granted AND k.pid <> pg_backend_pid()) ` +
	`FROM pg_class t LEFT JOIN pg_index i ON i.indrelid = t.oid LEFT JOIN pg_class c ON c.oid = i.indexrelid ` +
	`WHERE t.oid = to_regclass(quote_ident(current_schema()) || '.' || quote_ident(?))`

// concurrently runs a concurrent index build or drop; *busy is set when
// it lost to another process's on the same table.
//
// Two of them on one table wait for each other: each waits for the
// transactions older than its own to end, and the other's is one, while
// the table's lock lets only one through. PostgreSQL ends the deadlock by
// failing one, which leaves its index invalid, for the next round to
// rebuild. Two starting the same build together: the other made its
// catalog entry first. Two dropping the same invalid index together: the
// other changed its catalog row first, which PostgreSQL reports only as an
// internal error (XX000, "tuple concurrently updated").
func (l *Ledger) concurrently(ctx context.Context, stmt string, busy *bool) error {
	err := l.w.WithContext(ctx).Exec(stmt).Error
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "42P07" || pe.Code == "23505" ||
		pe.Code == "XX000" && pe.Message == "tuple concurrently updated") {
		*busy = true
		return nil
	}
	return err
}

func createIndexSQL(table, name, where string, fields []schema.IndexOption) string {
	cols := make([]string, len(fields))
	for i, f := range fields {
		cols[i] = quoteIdent(f.DBName)
	}
	s := "CREATE INDEX CONCURRENTLY IF NOT EXISTS " + quoteIdent(name) + " ON " + quoteIdent(table) +
		" (" + strings.Join(cols, ", ") + ")"
	if where != "" {
		s += " WHERE " + where
	}
	return s
}

func quoteIdent(s string) string { return pgx.Identifier{s}.Sanitize() }
