// Command loadbench measures hookstamp against its physical limits in one
// run: a bare reverse-proxy hop, the raw rates of PostgreSQL and Redis, and
// hookstamp in each configuration, on loopback, interleaved (make bench,
// make bench-quick). See docs/performance.md.
//
//	loadbench [-quick] [-out bench/results] [-pg DSN] [-redis ADDR]
//	          [-systems B0,B2] [-skip-scale] [-skip-rss] [-pprof DIR]
//	          [-wait-load 1.5 -wait-max 30m] [-seed N]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hookstamp/hookstamp/bench/loadbench"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "child" {
		if err := loadbench.ChildMain(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "loadbench child:", err)
			os.Exit(1)
		}
		return
	}
	os.Exit(run())
}

func run() int {
	quick := flag.Bool("quick", false, "short windows and a small prefill (about 4 minutes)")
	out := flag.String("out", "bench/results", "directory for latest.json and latest.svg")
	pg := flag.String("pg", env("HOOKSTAMP_TEST_PG", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "PostgreSQL server (a schema per system is made and dropped)")
	rds := flag.String("redis", env("HOOKSTAMP_TEST_REDIS", "127.0.0.1:6379"), "Redis server (keys under a run prefix, deleted after)")
	systems := flag.String("systems", "", "comma-separated systems for the interleaved rounds (default all)")
	skipScale := flag.Bool("skip-scale", false, "skip the prefilled-ledger and sweeper measurements")
	skipRSS := flag.Bool("skip-rss", false, "skip the long memory run")
	pprofDir := flag.String("pprof", "", "write a CPU profile of each gateway child at c=64 in the last round here")
	rounds := flag.Int("rounds", 0, "override the number of rounds")
	cell := flag.Duration("cell", 0, "override the measured time of a closed-loop cell")
	rss := flag.Duration("rss", 0, "override the duration of the memory run")
	openRate := flag.Float64("open-rate", 0, "override the open loop's offered rate (requests a second)")
	l1 := flag.Int("l1-conns", 0, "override L1's connection cap")
	onUnavailable := flag.String("screen-on-unavailable", "", "screen.on_unavailable of the Redis gateways (default: hookstamp's, store)")
	baseline := flag.String("baseline", "", "also run the Redis+PG, ledger-only and embedded gateways from this other build of loadbench (systems B1@base…), interleaved, for before/after")
	concs := flag.String("concurrency", "", "comma-separated closed-loop concurrencies (default 16,64,256)")
	keep := flag.Bool("keep", false, "keep the work directory (child configurations and logs)")
	waitLoad := flag.Float64("wait-load", 0, "before starting, wait until the 1-minute load average is below this (0 = don't wait)")
	waitMax := flag.Duration("wait-max", 30*time.Minute, "give up waiting for a quiet machine after this long (and run anyway)")
	seed := flag.Uint64("seed", 0, "seed of the systems' shuffled order in each pass of the rounds (0 = from the clock; the report's settings.order_seed)")
	render := flag.String("render", "", "print the table and redraw the chart of an earlier run's JSON (no measurement)")
	flag.Parse()
	if *render != "" {
		return rerender(*render, *out)
	}

	o := loadbench.Full()
	if *quick {
		o = loadbench.Quick()
	}
	o.PostgresDSN, o.RedisAddr, o.OutDir = *pg, *rds, *out
	o.SkipScale, o.SkipRSS, o.ProfileDir, o.Keep = *skipScale, *skipRSS, *pprofDir, *keep
	o.ScreenOnUnavailable, o.Baseline, o.Seed = *onUnavailable, *baseline, *seed
	if *concs != "" {
		o.Concurrency = nil
		for _, c := range strings.Split(*concs, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(c))
			if err != nil || n <= 0 {
				fmt.Fprintf(os.Stderr, "loadbench: -concurrency %q: want positive integers\n", *concs)
				return 2
			}
			o.Concurrency = append(o.Concurrency, n)
		}
	}
	if *systems != "" {
		for _, s := range strings.Split(*systems, ",") {
			o.Systems = append(o.Systems, strings.TrimSpace(s))
		}
	}
	if *rounds > 0 {
		o.Rounds = *rounds
	}
	if *cell > 0 {
		o.Cell = *cell
	}
	if *openRate > 0 {
		o.OpenRate = *openRate
	}
	if *rss > 0 {
		o.RSSDur = *rss
	}
	if *l1 > 0 {
		o.L1Conns = *l1
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *waitLoad > 0 {
		waitQuiet(ctx, *waitLoad, *waitMax)
	}
	start := time.Now()
	rep, err := loadbench.Run(ctx, o)
	code := write(rep, err, o.OutDir, os.Stdout, os.Stderr)
	fmt.Fprintf(os.Stderr, "loadbench: %v in all\n", time.Since(start).Round(time.Second))
	return code
}

// failedJSON is where a failed run's report goes, beside latest.json.
const failedJSON = "failed-run.json"

// write prints the run's report and writes it into out: latest.json and
// latest.svg when the run passed (removing a failed run's file left from
// before); failed-run.json alone when it failed (runErr), leaving the
// last good run's files as they were. It returns the exit code.
func write(rep *loadbench.Report, runErr error, out string, stdout, stderr io.Writer) int {
	if rep == nil {
		fmt.Fprintln(stderr, "loadbench:", runErr)
		return 1
	}
	rep.PrintTable(stdout)
	if err := os.MkdirAll(out, 0o755); err != nil {
		fmt.Fprintln(stderr, "loadbench:", err)
		return 1
	}
	fp := filepath.Join(out, failedJSON)
	if runErr != nil {
		fmt.Fprintln(stderr, "loadbench:", runErr)
		if err := rep.WriteJSON(fp); err != nil {
			fmt.Fprintln(stderr, "loadbench:", err)
			return 1
		}
		fmt.Fprintf(stderr, "loadbench: latest.json left as it was; this run's report is in %s\n", fp)
		return 1
	}
	jp, sp := filepath.Join(out, "latest.json"), filepath.Join(out, "latest.svg")
	if err := rep.WriteJSON(jp); err != nil {
		fmt.Fprintln(stderr, "loadbench:", err)
		return 1
	}
	if err := rep.WriteSVG(sp); err != nil {
		fmt.Fprintln(stderr, "loadbench:", err)
		return 1
	}
	if err := os.Remove(fp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		fmt.Fprintln(stderr, "loadbench:", err)
	}
	fmt.Fprintf(stdout, "\nwrote %s and %s\n", jp, sp)
	return 0
}

func rerender(path, out string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadbench:", err)
		return 1
	}
	var rep loadbench.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		fmt.Fprintln(os.Stderr, "loadbench:", err)
		return 1
	}
	rep.PrintTable(os.Stdout)
	sp := filepath.Join(out, "latest.svg")
	if err := rep.WriteSVG(sp); err != nil {
		fmt.Fprintln(os.Stderr, "loadbench:", err)
		return 1
	}
	fmt.Println("wrote", sp)
	return 0
}

func waitQuiet(ctx context.Context, limit float64, maxWait time.Duration) {
	deadline := time.Now().Add(maxWait)
	for {
		l := loadbench.LoadAvg()
		if l < limit {
			fmt.Fprintf(os.Stderr, "load average %.2f < %.2f: starting\n", l, limit)
			return
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(os.Stderr, "load average still %.2f after %v: running anyway (the report records it)\n", l, maxWait)
			return
		}
		fmt.Fprintf(os.Stderr, "load average %.2f ≥ %.2f: waiting\n", l, limit)
		select {
		case <-ctx.Done():
			return
		case <-time.After(15 * time.Second):
		}
	}
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
