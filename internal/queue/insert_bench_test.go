package queue_test

import (
	"context"
	"database/sql"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverdatabasesql"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/hookstamp/hookstamp/internal/queue"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// jobBatch is the intake's batch at 64 connections, about.
const jobBatch = 16

// BenchmarkJobInsert inserts a batch of delivery jobs in a transaction of
// its own, through River's database/sql driver (what the intake does, in
// the ledger's transaction) and through its pgx driver, which encodes the
// arrays in binary instead of as text pgx parses again. cpu-µs/job is this
// process's CPU (user and system) a job.
func BenchmarkJobInsert(b *testing.B) {
	dsn := testenv.Postgres(b)
	ctx := context.Background()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	m, err := rivermigrate.New(riverdatabasesql.New(db), nil)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		b.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	sqlClient, err := river.NewClient(riverdatabasesql.New(nil), &river.Config{})
	if err != nil {
		b.Fatal(err)
	}
	pgxClient, err := river.NewClient(riverpgxv5.New(nil), &river.Config{})
	if err != nil {
		b.Fatal(err)
	}
	params := func(i int) []river.InsertManyParams {
		ps := make([]river.InsertManyParams, jobBatch)
		for j := range ps {
			ps[j] = river.InsertManyParams{Args: queue.Args{Route: "relay", Key: fmt.Sprintf("evt_%d_%d", i, j)},
				InsertOpts: &river.InsertOpts{Queue: queue.QueueName("relay"), MaxAttempts: 1000}}
		}
		return ps
	}
	measure := func(b *testing.B, insert func(i int) error) {
		before := cpu()
		b.ResetTimer()
		for i := 0; b.Loop(); i++ {
			if err := insert(i); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64((cpu()-before).Microseconds())/float64(b.N*jobBatch), "cpu-µs/job")
	}
	b.Run("databasesql", func(b *testing.B) {
		measure(b, func(i int) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			if _, err := sqlClient.InsertManyFastTx(ctx, tx, params(i)); err != nil {
				return err
			}
			return tx.Commit()
		})
	})
	b.Run("pgxv5", func(b *testing.B) {
		measure(b, func(i int) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				_, err := pgxClient.InsertManyFastTx(ctx, tx, params(i))
				return err
			})
		})
	})
}

// cpu is the CPU this process has used.
func cpu() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
