package pgdsn

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// The timeout reaches pgx in both DSN forms, rounded up to whole seconds
// (connect_timeout's unit), and one the user set is kept.
func TestWithConnectTimeout(t *testing.T) {
	t.Setenv("PGCONNECT_TIMEOUT", "")
	for _, tc := range []struct {
		dsn  string
		d    time.Duration
		want time.Duration
	}{
		{"postgres://u@db:5432/app", 5 * time.Second, 5 * time.Second},
		{"postgres://u@db:5432/app?sslmode=disable", 1500 * time.Millisecond, 2 * time.Second},
		{"postgresql://u@db/app?connect_timeout=30", 5 * time.Second, 30 * time.Second},
		{"host=db user=u dbname=app", 5 * time.Second, 5 * time.Second},
		{"host=db connect_timeout=7", 5 * time.Second, 7 * time.Second},
	} {
		cfg, err := pgconn.ParseConfig(WithConnectTimeout(tc.dsn, tc.d))
		if err != nil {
			t.Fatalf("%q: %v", tc.dsn, err)
		}
		if cfg.ConnectTimeout != tc.want {
			t.Errorf("%q with %v: connect timeout %v, want %v", tc.dsn, tc.d, cfg.ConnectTimeout, tc.want)
		}
	}
	t.Setenv("PGCONNECT_TIMEOUT", "9")
	if got := WithConnectTimeout("postgres://u@db/app", 5*time.Second); got != "postgres://u@db/app" {
		t.Errorf("with PGCONNECT_TIMEOUT set the DSN became %q", got)
	}
}
