package sqlledger

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"

	"gorm.io/gorm/logger"

	"github.com/hookstamp/hookstamp/internal/testenv"
)

// The SQLite writer is opened with GORM's logging silenced (a busy open is
// tried again); once open, it logs slow statements again.
func TestSQLiteWriterKeepsItsLogger(t *testing.T) {
	var out testenv.Buffer
	l, err := Open(context.Background(), Options{Driver: DriverSQLite, DSN: filepath.Join(t.TempDir(), "ledger.db"),
		Logger: slog.New(slog.NewTextHandler(&out, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if g, ok := l.w.Logger.(*gormLogger); !ok || g.level != logger.Warn {
		t.Errorf("the writer's logger is %#v, want the ledger's at warn level", l.w.Logger)
	}
}
