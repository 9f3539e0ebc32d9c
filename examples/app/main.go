// Command app is a small payments application behind hookstamp: it books
// one payment per webhook event, exactly once, with the inbox library.
//
// It listens where config.yaml's demo route forwards (127.0.0.1:9000/demo):
//
//	go run ./examples/app                               # SQLite file data/payments.db
//	go run ./cmd/gateway serve -config config.yaml      # the gateway of make run, without its demo upstream
//	curl -i -X POST localhost:8080/webhooks/demo -H 'X-Event-Id: evt_1' -d '{"amount":1200,"currency":"eur"}'
//	curl localhost:9000/payments
//
// The gateway forwards each event once and replays its answer to repeats;
// the inbox covers the one case it cannot, a gateway killed mid-forward,
// whose retry reaches the application a second time with the same
// Idempotency-Key: the key is recorded in the payment's own transaction, so
// the second copy books nothing and gets the first answer.
//
//	app [-listen 127.0.0.1:9000] [-driver sqlite|postgres] [-dsn DSN]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

func run(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("app", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c Config
	fs.StringVar(&c.Driver, "driver", "sqlite", "database: sqlite or postgres")
	fs.StringVar(&c.DSN, "dsn", "data/payments.db", "SQLite file, or a postgres:// URL")
	listen := fs.String("listen", "127.0.0.1:9000", "where the gateway forwards (config.yaml's demo route)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	if err := serve(*listen, c, log); err != nil {
		log.Error("app stopped", "err", err)
		return 1
	}
	return 0
}

func serve(listen string, c Config, log *slog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	a, err := New(c, log)
	if err != nil {
		return err
	}
	defer a.Close()
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	log.Info("payments app listening", "addr", ln.Addr().String(), "driver", c.Driver)
	if err := a.Serve(ctx, ln); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
