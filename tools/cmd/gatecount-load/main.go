// Command gatecount-load runs several example servers (examples/stdlib) over
// one limit store and drives POST /execute at them from many concurrent
// clients, then reports throughput, latency, each caller's admissions
// against its budget, and every error.
//
// Usage, from the tools module (it builds examples/stdlib in the library's):
//
//	cd tools && go run ./cmd/gatecount-load [flags]
//
//	-store memory|sqlite|postgres|redis   where the servers count (default memory)
//	-servers N        server processes (default 2)
//	-clients N        requests in flight at once (default 64)
//	-duration D       stop sending after D (default 10s)
//	-requests N       stop after N requests (default 20000); both bounds apply
//	-callers N        distinct callers, each with its own token (default 20)
//	-budget N         RATE_LIMIT_EXECUTE_PER_MINUTE of the servers (default 30)
//	-database-url U   PostgreSQL (default postgres://postgres@127.0.0.1:5432/test)
//	-redis-url U      Redis (default redis://127.0.0.1:6379/0)
//	-keep-logs        keep the servers' logs (printed path) instead of removing them
//	-burst N          burst mode: N concurrent POST /execute per round (see below)
//	-rounds N         rounds of the burst mode (default 1)
//	-server-bin PATH  a built examples/stdlib to run instead of building one
//
// It builds examples/stdlib once into a temporary directory, and migrates
// the store (PostgreSQL, SQLite: a file in that directory). It starts the
// servers on free loopback ports with a fresh random GATECOUNT_SECRET, so
// that runs never share counts. It waits until each answers GET /health.
// The clients then send request i as caller i mod callers to server (i div
// callers) mod servers, so every caller reaches every server in turn, over
// loopback only.
//
// While it runs, a progress line goes to standard error about once a second:
//
//	3.0s  requests   14035  rate     4702/s  admitted    600  refused   13435  errors 0
//
// At the end the report goes to standard output:
//
//	store       postgres (shared), 2 servers, 64 clients, 20 callers, budget 30 per minute
//	requests    20000 in 4.31s: 4640 req/s
//	latency     p50 12.1ms  p99 40.2ms  p999 61.3ms  max 70.1ms
//	statuses    200: 600  429: 19400
//	admitted    per caller, expected exactly 30 per window across all 2 servers (shared store)
//	  caller-000   admitted   30 (server-1 16, server-2 14)  refused   970  errors 0  windows 1  ok
//	  …
//	errors      none
//	budgets     exact: every caller answered at least the budget in a window was admitted exactly the budget
//
// On a shared store each caller must be admitted exactly the budget in each
// budget window in which it was answered (200 or 429) at least the budget
// times. On the memory store each server counts alone, so the expected is
// budget × servers per caller, exactly the budget on each server; the report
// says so. A run shorter than the 60-second window sees one window per
// caller; a longer one is accounted window by window, from the end of the
// window each answer's RateLimit field tells. Errors are listed by kind:
// connection refused or reset, timeouts, 5xx statuses (a 503 is the store
// unavailable), and unexpected statuses.
//
// # Burst mode
//
// With -burst N, each of -rounds rounds sends N POST /execute at once,
// every one on a connection of its own. They are for one caller the round
// alone uses, so it starts with the whole budget, and request i goes to
// server i mod servers. The rounds run one after another, and -callers,
// -clients, -duration and -requests do not apply. On a shared store each
// round must be answered exactly budget × 200 and the rest 429; on the
// memory store, the budget on each server. Any other status (a 503: the
// store answered unavailable) or a failed request makes the round WRONG:
//
//	store       postgres (shared), 2 servers, budget 30 per minute
//	burst       3 rounds of 500 concurrent POST /execute, one fresh caller each, split over 2 servers
//	round 1     caller-000  500 answered:  200: 30  429: 470  in 0.16s  ok
//	round 2     caller-001  500 answered:  200: 30  429: 147  503: 323  (errors: 5xx 503 Service Unavailable 323)  in 0.10s  WRONG: want exactly 30 × 200 and 470 × 429
//	round 3     caller-002  500 answered:  200: 30  429: 470  in 0.11s  ok
//	bursts      1 of 3 rounds WRONG
//
// Exit status: 0 when every budget held exactly, 1 when one did not or the
// run failed (a server would not start, say), 2 on a usage error, 130 when
// interrupted (after the report). The
// servers are stopped (SIGTERM, then SIGKILL after 5 seconds) when the run
// ends, on an error, and on Ctrl-C, which also prints the report of what
// was sent so far; on Linux they are killed should this command die.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/gatecount/gatecount/internal/loadtest"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// options are the command's flags.
type options struct {
	store       loadtest.Store
	servers     int
	clients     int
	duration    time.Duration
	requests    int
	callers     int
	budget      int
	databaseURL string
	redisURL    string
	keepLogs    bool
	bin         string
	burst       int
	rounds      int
}

func parse(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("gatecount-load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	storeName := fs.String("store", "memory", "where the servers count: memory, sqlite, postgres or redis")
	fs.IntVar(&o.servers, "servers", 2, "server processes")
	fs.IntVar(&o.clients, "clients", loadtest.DefaultClients, "requests in flight at once")
	fs.DurationVar(&o.duration, "duration", loadtest.DefaultDuration, "stop sending after this long")
	fs.IntVar(&o.requests, "requests", loadtest.DefaultRequests, "stop after this many requests")
	fs.IntVar(&o.callers, "callers", 20, "distinct callers (API keys)")
	fs.IntVar(&o.budget, "budget", 30, "RATE_LIMIT_EXECUTE_PER_MINUTE given to the servers")
	fs.StringVar(&o.databaseURL, "database-url", loadtest.DefaultPostgresURL, "PostgreSQL URL, for -store postgres")
	fs.StringVar(&o.redisURL, "redis-url", loadtest.DefaultRedisURL, "Redis URL, for -store redis")
	fs.BoolVar(&o.keepLogs, "keep-logs", false, "keep the servers' logs and print where they are")
	fs.StringVar(&o.bin, "server-bin", "", "a built examples/stdlib to run instead of building one, with cmd/gatecount built beside it")
	fs.IntVar(&o.burst, "burst", 0, "burst mode: this many concurrent POST /execute per round, for one fresh caller")
	fs.IntVar(&o.rounds, "rounds", 1, "rounds of the burst mode")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	s, err := loadtest.ParseStore(*storeName)
	if err != nil {
		return o, err
	}
	o.store = s
	switch {
	case o.servers < 1, o.clients < 1, o.callers < 1, o.budget < 1, o.requests < 1, o.rounds < 1:
		return o, errors.New("-servers, -clients, -callers, -budget, -requests and -rounds must be at least 1")
	case o.burst < 0:
		return o, errors.New("-burst must not be negative")
	case o.duration <= 0:
		return o, errors.New("-duration must be positive")
	}
	return o, nil
}

// run runs the command and returns its exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "gatecount-load:", err)
		return 2
	}
	dir, err := os.MkdirTemp("", "gatecount-load-")
	if err != nil {
		fmt.Fprintln(stderr, "gatecount-load:", err)
		return 1
	}
	if o.keepLogs {
		defer fmt.Fprintln(stderr, "gatecount-load: server logs in", dir)
	} else {
		defer os.RemoveAll(dir)
	}

	ncallers := o.callers
	if o.burst > 0 {
		ncallers = o.rounds // one fresh caller per round
	}
	callers := loadtest.NewCallers(ncallers)
	cluster, err := start(ctx, o, dir, callers, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "gatecount-load:", err)
		return 1
	}
	defer func() {
		if err := cluster.Close(); err != nil {
			fmt.Fprintln(stderr, "gatecount-load:", err)
		}
	}()
	if o.burst > 0 {
		return bursts(ctx, o, cluster, callers, stdout, stderr)
	}
	return steady(ctx, o, cluster, callers, stdout, stderr)
}

// start builds the example server unless o names one, and starts o.servers
// of it over o.store, logging to dir.
func start(ctx context.Context, o options, dir string, callers []loadtest.Caller, stderr io.Writer) (*loadtest.Cluster, error) {
	bin := o.bin
	if bin == "" {
		fmt.Fprintln(stderr, "gatecount-load: building", loadtest.ServerPackage)
		var err error
		if bin, err = loadtest.Build(ctx, dir); err != nil {
			return nil, err
		}
	}
	fmt.Fprintf(stderr, "gatecount-load: starting %d servers over the %s store\n", o.servers, o.store)
	cluster, err := loadtest.StartCluster(ctx, loadtest.ClusterConfig{
		Bin:         bin,
		Dir:         dir,
		Servers:     o.servers,
		Store:       o.store,
		DatabaseURL: o.databaseURL,
		RedisURL:    o.redisURL,
		Budget:      o.budget,
		Callers:     callers,
	})
	if err != nil {
		return nil, err
	}
	for _, s := range cluster.Servers {
		fmt.Fprintf(stderr, "gatecount-load: %s at %s\n", s.Name, s.URL)
	}
	return cluster, nil
}

// steady runs the steady load of o against cluster, writes its report and
// returns the exit code: 1 when a check failed or a server exited.
func steady(ctx context.Context, o options, cluster *loadtest.Cluster, callers []loadtest.Caller, stdout, stderr io.Writer) int {
	res, err := loadtest.Run(ctx, loadtest.LoadConfig{
		Targets:  cluster.URLs(),
		Callers:  callers,
		Clients:  o.clients,
		Duration: o.duration,
		Requests: o.requests,
		Progress: func(p loadtest.Progress) { fmt.Fprintln(stderr, p) },
	})
	if err != nil {
		fmt.Fprintln(stderr, "gatecount-load:", err)
		return 1
	}
	fmt.Fprintf(stdout, "store       %s (%s), %d servers, %d clients, %d callers, budget %d per minute\n",
		o.store, shared(o.store), o.servers, o.clients, o.callers, o.budget)
	expect := loadtest.Expect{Budget: o.budget, Shared: o.store.Shared()}
	res.Write(stdout, expect)
	if exited(cluster, stderr) {
		return 1
	}
	if len(res.Check(expect)) > 0 {
		return 1
	}
	if res.Interrupted {
		return 130
	}
	return 0
}

func shared(s loadtest.Store) string {
	if s.Shared() {
		return "shared"
	}
	return "not shared"
}

// exited reports, on stderr, a server that exited during the run.
func exited(cluster *loadtest.Cluster, stderr io.Writer) bool {
	for _, s := range cluster.Servers {
		select {
		case <-s.Done():
			fmt.Fprintf(stderr, "gatecount-load: %s exited during the run:\n%s\n", s.Name, s.LogTail(10))
			return true
		default:
		}
	}
	return false
}

// bursts runs the burst mode: o.rounds rounds of o.burst concurrent
// requests, round i as callers[i], and returns the exit status.
func bursts(ctx context.Context, o options, cluster *loadtest.Cluster, callers []loadtest.Caller, stdout, stderr io.Writer) int {
	fmt.Fprintf(stdout, "store       %s (%s), %d servers, budget %d per minute\n", o.store, shared(o.store), o.servers, o.budget)
	fmt.Fprintf(stdout, "burst       %d rounds of %d concurrent POST /execute, one fresh caller each, split over %d servers\n",
		o.rounds, o.burst, o.servers)
	expect := loadtest.Expect{Budget: o.budget, Shared: o.store.Shared()}
	wrong := 0
	for i, c := range callers {
		res, err := loadtest.Burst(ctx, cluster.URLs(), c, o.burst)
		if err != nil {
			fmt.Fprintln(stderr, "gatecount-load:", err)
			return 1
		}
		verdict := "ok"
		if err := res.CheckBurst(expect, o.burst); err != nil {
			wrong++
			want := res.BurstWant(expect, o.burst)
			verdict = fmt.Sprintf("WRONG: want exactly %d × 200 and %d × 429", want, o.burst-want)
		}
		fmt.Fprintf(stdout, "round %-5d %s  %s  in %.2fs  %s\n", i+1, c.Name, res.BurstSummary(), res.Elapsed.Seconds(), verdict)
		if res.Interrupted {
			break
		}
	}
	if wrong == 0 {
		fmt.Fprintf(stdout, "bursts      exact: every round admitted exactly what the budget allows and refused the rest with 429\n")
	} else {
		fmt.Fprintf(stdout, "bursts      %d of %d rounds WRONG\n", wrong, o.rounds)
	}
	switch {
	case exited(cluster, stderr), wrong > 0:
		return 1
	case ctx.Err() != nil:
		return 130
	}
	return 0
}
