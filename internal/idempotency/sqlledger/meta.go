package sqlledger

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"

	"gorm.io/gorm"
)

// MetaTable holds facts about the ledger itself, one row per name: for
// now its deployment identity (SPEC §5).
const MetaTable = "hookstamp_meta"

// metaDeployment names the row of the ledger's deployment identity.
const metaDeployment = "deployment"

// metaRow is the hookstamp_meta schema, for AutoMigrate only.
type metaRow struct {
	Name  string `gorm:"column:name;type:text;primaryKey"`
	Value string `gorm:"column:value;type:text;not null"`
}

// TableName implements GORM's tabler.
func (metaRow) TableName() string { return MetaTable }

// ErrNoDeployment: the ledger has no deployment identity to read: its
// schema predates hookstamp_meta (a migration not run yet), or the role
// may not read the table.
var ErrNoDeployment = errors.New("the ledger has no deployment identity: " + MetaTable + " cannot be read (run gateway migrate)")

// writeDeployment gives a ledger its deployment identity, a random id,
// the first time it is migrated; later migrations keep the one it has.
// Every gateway on the ledger, and only those, then names the same id.
// A ledger that has one is only read: a migration on an up-to-date
// database writes nothing, so a replica whose DSN is a read-only standby
// still starts with auto_migrate.
func writeDeployment(tx *gorm.DB) error {
	var n int64
	if err := tx.Raw("SELECT COUNT(*) FROM "+MetaTable+" WHERE name = ?", metaDeployment).Scan(&n).Error; err != nil {
		return err
	}
	if n > 0 {
		return nil
	}
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (it crashes the program instead)
	return tx.Exec("INSERT INTO "+MetaTable+" (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING",
		metaDeployment, hex.EncodeToString(b)).Error
}

// Deployment is the ledger's deployment identity, written once by its
// first migration: the gateways serving this ledger are one deployment,
// and a Redis screen.prefix is claimed for it (internal/gateway). It is
// ErrNoDeployment when the ledger has none (schema older than
// hookstamp_meta), and wraps ErrUnavailable when the database does not
// answer.
func (l *Ledger) Deployment(ctx context.Context) (string, error) {
	if err := l.check(); err != nil {
		return "", fmt.Errorf("deployment: %w", err)
	}
	ctx, cancel := l.op(ctx)
	defer cancel()
	sdb, err := l.r.DB()
	if err != nil {
		return "", l.fail("deployment", err)
	}
	// database/sql, not GORM: GORM's prepared-statement mode hides a
	// missing table from Row().
	var id string
	err = sdb.QueryRowContext(ctx, "SELECT value FROM "+MetaTable+" WHERE name = '"+metaDeployment+"'").Scan(&id)
	switch {
	case err == nil:
		return id, nil
	case errors.Is(err, sql.ErrNoRows):
		return "", ErrNoDeployment
	case l.unavailable(err):
		return "", l.fail("deployment", err)
	}
	return "", fmt.Errorf("%w: %w", ErrNoDeployment, err)
}

// probeSize is the probe row's value, random hex: larger than a page and
// incompressible (PostgreSQL compresses a long value in place), so that
// it is written to pages the database must find room for, as a
// delivery's record is; an update in place of a small row fits where it
// was.
const probeSize = 8 << 10

// ProbeWrite inserts a row of hookstamp_meta the size of a delivery's
// record and deletes it, committed: a database that answers reads and
// refuses writes (a full disk, a read-only role or standby) fails it with
// ErrUnavailable, as it fails a delivery's claim or commit.
func (l *Ledger) ProbeWrite(ctx context.Context) error {
	if err := l.check(); err != nil {
		return fmt.Errorf("probe write: %w", err)
	}
	ctx, cancel := l.op(ctx)
	defer cancel()
	sdb, err := l.w.DB()
	if err != nil {
		return l.fail("probe write", err)
	}
	b := make([]byte, probeSize/2)
	_, _ = rand.Read(b)
	value := hex.EncodeToString(b)
	name := "write-probe:" + value[:16]
	tx, err := sdb.BeginTx(ctx, nil)
	if err != nil {
		return l.fail("probe write", err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, l.d.rebind("INSERT INTO "+MetaTable+" (name, value) VALUES (?, ?)"), name, value); err != nil {
		return l.fail("probe write", err)
	}
	if _, err := tx.ExecContext(ctx, l.d.rebind("DELETE FROM "+MetaTable+" WHERE name = ?"), name); err != nil {
		return l.fail("probe write", err)
	}
	if err := tx.Commit(); err != nil {
		return l.fail("probe write", err)
	}
	return nil
}
