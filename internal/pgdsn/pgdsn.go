// Package pgdsn adjusts the PostgreSQL connection strings hookstamp opens
// pools with.
package pgdsn

import (
	"math"
	"os"
	"strconv"
	"strings"
	"time"
)

// WithConnectTimeout returns dsn bounding each new connection (dial, TLS
// and start-up) to d, unless it, or PGCONNECT_TIMEOUT, sets connect_timeout
// already. Without one a connection whose server stops answering during
// start-up waits for TCP to give up, which can be many minutes; database/sql
// opens the connections its waiting callers asked for in one goroutine, so
// the whole pool waits with it, long after the database is back.
func WithConnectTimeout(dsn string, d time.Duration) string {
	if strings.Contains(dsn, "connect_timeout") || os.Getenv("PGCONNECT_TIMEOUT") != "" || d <= 0 {
		return dsn
	}
	param := "connect_timeout=" + strconv.Itoa(int(math.Ceil(d.Seconds())))
	switch {
	case strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://"):
		if strings.Contains(dsn, "?") {
			return dsn + "&" + param
		}
		return dsn + "?" + param
	case strings.TrimSpace(dsn) == "":
		return param
	default:
		return dsn + " " + param
	}
}
