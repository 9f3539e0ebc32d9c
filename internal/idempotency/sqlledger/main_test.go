package sqlledger_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that Close leaves no goroutine behind (pool openers,
// pgx cancel watchers, SQLite interrupt watchers).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
