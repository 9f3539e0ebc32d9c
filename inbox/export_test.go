package inbox

import (
	"testing"
	"time"
)

// SetMigrateLockWait shortens how long Migrate waits for another
// process's migration lock on MySQL/MariaDB, until the test ends.
func SetMigrateLockWait(tb testing.TB, d time.Duration) {
	old := migrateLockWait
	migrateLockWait = d
	tb.Cleanup(func() { migrateLockWait = old })
}
