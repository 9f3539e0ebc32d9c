package testenv

import (
	"cmp"
	"context"
	"database/sql"
	"os"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// MySQLAdminDSN is the MySQL/MariaDB server the tests use (a go-sql-driver
// DSN); HOOKSTAMP_TEST_MYSQL overrides it.
func MySQLAdminDSN() string {
	return cmp.Or(os.Getenv("HOOKSTAMP_TEST_MYSQL"), "root@tcp(127.0.0.1:3306)/test")
}

// MySQL creates a database of its own for the test on the MySQL/MariaDB
// server and returns its DSN (parseTime on). The database is dropped when
// the test ends.
func MySQL(tb testing.TB) string {
	tb.Helper()
	admin := MySQLAdminDSN()
	cfg, err := mysql.ParseDSN(admin)
	if err != nil {
		tb.Fatalf("testenv: MySQL DSN %q: %v", admin, err)
	}
	db, err := sql.Open("mysql", admin)
	if err != nil {
		tb.Fatalf("testenv: MySQL DSN %q: %v", admin, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		tb.Fatalf("testenv: MySQL/MariaDB at %s not reachable (start it: service mariadb start): %v", cfg.Addr, err)
	}
	name := Name("hs_")
	if _, err := db.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		db.Close()
		tb.Fatalf("testenv: create database: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := db.ExecContext(ctx, "DROP DATABASE "+name); err != nil {
			tb.Errorf("testenv: drop database %s: %v", name, err)
		}
		db.Close()
	})
	cfg.DBName = name
	cfg.ParseTime = true
	return cfg.FormatDSN()
}
