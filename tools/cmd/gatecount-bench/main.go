// Command gatecount-bench runs the project's benchmarks and load runs, in one
// go, and writes a report of what they print. BENCHMARKS.md quotes today's
// figures from such a report. Run it from the tools module:
//
//	cd tools && go run ./cmd/gatecount-bench -count 6 -o /tmp/b.md
//
// It runs `go test -run '^$' -bench . -benchmem -count N` in each package
// of the library with benchmarks, one after another (so they do not compete
// for the machine), and summarises each with benchstat. It then runs
// `go run ./cmd/gatecount-load` of the tools module with two servers over
// each store. The stores' benchmarks and load runs need the PostgreSQL and
// Redis servers the tests use (see CONTRIBUTING.md). A run takes about 15
// minutes with the defaults.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/gatecount/gatecount/internal/loadtest"
)

// benchstat is the pinned benchstat the summaries come from.
const benchstat = "golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da"

// packages are the packages with benchmarks, each with what it measures.
var packages = []struct{ dir, what string }{
	{"./store/memory", "memory store: `Update` on one hot key, on 100,000 held keys and in parallel, next to `rate.Limiter.Allow`"},
	{"./limiter", "limiter `Attempt` on the memory store"},
	{"./middleware", "middleware on the memory store against a bare handler (httptest, no network)"},
	{"./keyfunc", "key functions: client IP, body fields, account normalisation"},
	{"./store/postgres", "PostgreSQL store: `SELECT 1` and a single-statement upsert counter as floors, `Update`, `Count` and `Attempt`"},
	{"./store/sqlite", "SQLite store: a bare transaction as the floor, `Update` and `Count`"},
	{"./store/redis", "Redis store: `INCR` as the floor, `Update` and `Count`"},
}

// stores are the load runs' stores.
var stores = []string{"memory", "sqlite", "postgres", "redis"}

func main() {
	out := flag.String("o", "", "the file to write (default standard output)")
	count := flag.Int("count", 3, "runs of each benchmark, for benchstat")
	loadDuration := flag.Duration("load-duration", 10*time.Second, "how long each load run drives the servers")
	skipLoad := flag.Bool("skip-load", false, "leave out the load runs")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *out, *count, *loadDuration, *skipLoad); err != nil {
		fmt.Fprintln(os.Stderr, "gatecount-bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out string, count int, loadDuration time.Duration, skipLoad bool) error {
	// The benchmarks run in the library's module, the load tool in this one.
	root, err := loadtest.LibraryDir(ctx)
	if err != nil {
		return err
	}
	var doc bytes.Buffer
	tmp, err := os.MkdirTemp("", "gatecount-bench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	fmt.Fprintf(&doc, "# Benchmark report\n\nMade by `cd tools && go run ./cmd/gatecount-bench` on %s: %s, %s, %d cores, load average at start %s.\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.Version(), cpuModel(), runtime.NumCPU(), loadAverage())
	fmt.Fprintf(&doc, "Each benchmark ran %d times; the tables are benchstat's summaries (median ± spread over the runs; benchstat wants 6 runs for a confidence interval, `-count 6` gives them). Figures from one machine at one moment: compare rows of one run, not runs of different days.\n", count)
	doc.WriteString(`
How to read them: each store's figures stand next to its floor in the same
run. Memory: ` + "`UpdateHotKey`" + ` against ` + "`YardstickAllow`" + ` (` + "`rate.Limiter.Allow`" + `). Middleware:
` + "`PerIPAllowed`" + ` against ` + "`BareHandler`" + `, the difference is the added cost. PostgreSQL:
` + "`Count`" + ` and ` + "`Update`" + ` against ` + "`UpsertCounter/async`" + ` (the best a special-purpose
store could do with the same commit setting) and ` + "`Select1`" + ` (a round trip).
SQLite: against ` + "`BareTx`" + `. Redis: against ` + "`INCR`" + `. The ops/s, p50-µs and p99-µs
tables of the stores come from each benchmark's own latency sample.
`)

	for _, p := range packages {
		progress("benchmarks %s", p.dir)
		// benchstat names its column after the file: the package's name.
		name := filepath.Base(p.dir)
		raw := filepath.Join(tmp, name)
		text, err := commandIn(ctx, root, "go", "test", "-run", "^$", "-bench", ".", "-benchmem", "-count", fmt.Sprint(count), "-timeout", "30m", p.dir)
		if err != nil {
			return fmt.Errorf("benchmarks of %s: %w\n%s", p.dir, err, text)
		}
		if err := os.WriteFile(raw, []byte(text), 0o644); err != nil {
			return err
		}
		summary, err := commandIn(ctx, tmp, "go", "run", benchstat, name)
		if err != nil {
			return fmt.Errorf("benchstat of %s: %w\n%s", p.dir, err, summary)
		}
		fmt.Fprintf(&doc, "\n## `%s`\n\n%s.\n\n```\n%s```\n", p.dir, p.what, summary)
	}

	if !skipLoad {
		doc.WriteString("\n## End to end: two `examples/stdlib` servers per store\n\n`cd tools && go run ./cmd/gatecount-load -store STORE -servers 2`: clients over loopback, `POST /execute` spread over both servers.\n")
		for _, s := range stores {
			progress("load run over %s", s)
			text, err := commandIn(ctx, filepath.Join(root, "tools"), "go", "run", "./cmd/gatecount-load", "-store", s, "-servers", "2", "-duration", loadDuration.String())
			if err != nil {
				return fmt.Errorf("load run over %s: %w\n%s", s, err, text)
			}
			fmt.Fprintf(&doc, "\n### %s\n\n```\n%s```\n", s, text)
		}
	}
	if out == "" {
		_, err := os.Stdout.Write(doc.Bytes())
		return err
	}
	return os.WriteFile(out, doc.Bytes(), 0o644)
}

// commandIn runs name with args in dir and returns what it printed on
// stdout; stderr goes to ours, for progress.
func commandIn(ctx context.Context, dir, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = io.MultiWriter(os.Stderr)
	err := cmd.Run()
	return stdout.String(), err
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "gatecount-bench: "+format+"\n", args...)
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
