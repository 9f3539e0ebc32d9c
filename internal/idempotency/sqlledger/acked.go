package sqlledger

import (
	"fmt"

	"gorm.io/gorm"
)

// relaxAcked makes an acked column declared NOT NULL DEFAULT false (as
// builds before it became tri-state made it) nullable without a default,
// the column recordRow declares: NULL is what a release that does not know
// the column leaves in the rows it writes, and it must stay told apart from
// a synchronous record (false). The values kept stay as they are.
//
// It runs before AutoMigrate, which would find the column different and
// alter it itself: on SQLite by rebuilding the table on a connection of its
// own, which the migration's transaction holds (the writer has one), so
// the migration never ended.
func relaxAcked(tx *gorm.DB, driver string) error {
	m := tx.Migrator()
	if !m.HasTable(&recordRow{}) {
		return nil
	}
	cols, err := m.ColumnTypes(&recordRow{})
	if err != nil {
		return fmt.Errorf("acked: %w", err)
	}
	notNull := false
	for _, c := range cols {
		if c.Name() == "acked" {
			nullable, ok := c.Nullable()
			notNull = ok && !nullable
		}
	}
	if !notNull {
		return nil
	}
	if driver == DriverPostgres {
		// Catalogue changes only: no row is read or written.
		return tx.Exec(`ALTER TABLE hookstamp_records ALTER COLUMN acked DROP NOT NULL, ALTER COLUMN acked DROP DEFAULT`).Error
	}
	// SQLite alters no column's constraints: the column is replaced by
	// one made as recordRow declares it, its values copied over.
	if err := tx.Exec(`ALTER TABLE hookstamp_records RENAME COLUMN acked TO acked_not_null`).Error; err != nil {
		return err
	}
	if err := m.AddColumn(&recordRow{}, "Acked"); err != nil {
		return err
	}
	if err := tx.Exec(`UPDATE hookstamp_records SET acked = acked_not_null`).Error; err != nil {
		return err
	}
	return tx.Exec(`ALTER TABLE hookstamp_records DROP COLUMN acked_not_null`).Error
}
