package testenv

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"testing"
	"time"
)

// PostgresRole creates a login role (no password: the tests' server trusts
// loopback) and returns its name. It is dropped when the test ends, after
// whatever the test creates later with a cleanup of its own, such as a
// database it owns, and with the privileges it was granted in the admin
// database (a schema from Postgres still holding them would keep it).
func PostgresRole(tb testing.TB, prefix string) string {
	tb.Helper()
	role := Name(prefix)
	if err := adminExec("CREATE ROLE " + role + " LOGIN"); err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	tb.Cleanup(func() {
		for _, stmt := range []string{"DROP OWNED BY " + role, "DROP ROLE " + role} {
			if err := adminExec(stmt); err != nil {
				tb.Errorf("testenv: %v", err)
			}
		}
	})
	return role
}

// PostgresDatabase creates a database of the test's own, owned by owner,
// and returns its DSN as the admin user: unlike a schema from Postgres, it
// has privileges of its own to grant and revoke (CONNECT, and those on its
// schema public), as an operator's database does. It is dropped when the
// test ends, with any connection still open to it.
func PostgresDatabase(tb testing.TB, owner string) string {
	tb.Helper()
	name := Name("hs_")
	if err := adminExec("CREATE DATABASE " + name + " OWNER " + owner); err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	tb.Cleanup(func() {
		if err := adminExec("DROP DATABASE " + name + " WITH (FORCE)"); err != nil {
			tb.Errorf("testenv: %v", err)
		}
	})
	u, err := url.Parse(PostgresAdminDSN())
	if err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}

// AsRole is dsn with role as its user.
func AsRole(tb testing.TB, dsn, role string) string {
	tb.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	u.User = url.User(role)
	return u.String()
}

// adminExec runs stmt on the tests' server as the admin user.
func adminExec(stmt string) error {
	db, err := sql.Open("pgx", PostgresAdminDSN())
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, stmt); err != nil {
		return fmt.Errorf("%s: %w (PostgreSQL at %s)", stmt, err, PostgresAdminDSN())
	}
	return nil
}

// PostgresExec runs each statement on the tests' server as the admin user.
func PostgresExec(tb testing.TB, stmts ...string) {
	tb.Helper()
	for _, stmt := range stmts {
		if err := adminExec(stmt); err != nil {
			tb.Fatalf("testenv: %v", err)
		}
	}
}
