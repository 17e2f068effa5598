package sqlite_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/sqlite"
)

// The test binary runs itself as a helper process when helperEnv is set:
// "race" counts in rounds on the file named by helperPath, "kill" counts
// until it is killed.
const (
	helperEnv  = "GATECOUNT_SQLITE_HELPER"
	helperPath = "GATECOUNT_SQLITE_HELPER_PATH"
)

const (
	raceGoroutines = 100
	raceBudget     = 30
	raceRounds     = 10
	killKeys       = 4
)

func helperMain(mode string) int {
	ctx := context.Background()
	s, err := sqlite.Open(ctx, os.Getenv(helperPath), sqlite.Options{
		Secret: secretA,
		// Every attempt must be answered, however long the other process
		// holds the file: no deadline or overload stands in for a refusal.
		Store: store.Options{Deadline: time.Minute, MaxInFlight: 4 * raceGoroutines},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer s.Close()
	h, err := s.Handle("race:")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	switch mode {
	case "race":
		return helperRace(ctx, h)
	case "kill":
		return helperKill(ctx, h)
	}
	fmt.Fprintln(os.Stderr, "unknown helper mode", mode)
	return 2
}

// helperRace reads a key per line of stdin, counts it from raceGoroutines
// goroutines at once, and prints how many were admitted.
func helperRace(ctx context.Context, h *store.Handle) int {
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		key := in.Text()
		var admitted, failed atomic.Int64
		var wg sync.WaitGroup
		for range raceGoroutines {
			wg.Go(func() {
				tl, err := h.Count(ctx, []string{key}, []store.Budget{{Limit: raceBudget, Window: time.Hour}}, 1)
				switch {
				case err != nil:
					failed.Add(1)
					fmt.Fprintln(os.Stderr, err)
				case tl.Allowed:
					admitted.Add(1)
				}
			})
		}
		wg.Wait()
		fmt.Println(key, admitted.Load(), failed.Load())
	}
	return 0
}

// helperKill counts killKeys keys, one goroutine each, and prints each
// admitted count once Count has returned, until it is killed or a minute
// has passed.
func helperKill(ctx context.Context, h *store.Handle) int {
	var mu sync.Mutex
	var wg sync.WaitGroup
	stop := time.Now().Add(time.Minute)
	for g := range killKeys {
		key := "kill-" + strconv.Itoa(g)
		wg.Go(func() {
			for time.Now().Before(stop) {
				tl, err := h.Count(ctx, []string{key}, []store.Budget{{Limit: 1 << 40, Window: time.Hour}}, 1)
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					continue
				}
				mu.Lock()
				fmt.Fprintln(os.Stdout, key, tl.Counts[0])
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return 0
}

type helper struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

func startHelper(t *testing.T, mode, path string) *helper {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, helperPath+"="+path)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &helper{cmd: cmd, in: in, out: bufio.NewScanner(out)}
	t.Cleanup(func() {
		in.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return h
}

func (h *helper) line(t *testing.T) string {
	t.Helper()
	if !h.out.Scan() {
		t.Fatalf("helper ended: %v", h.out.Err())
	}
	return h.out.Text()
}

// TestTwoProcessesShareOneBudget: two processes on one file, 100 goroutines
// each, admit exactly the budget of 30 between them, round after round.
func TestTwoProcessesShareOneBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	path := tempFile(t)
	hs := []*helper{startHelper(t, "race", path), startHelper(t, "race", path)}
	for _, h := range hs {
		if got := h.line(t); got != "ready" {
			t.Fatalf("helper said %q", got)
		}
	}
	for r := range raceRounds {
		key := "round-" + strconv.Itoa(r)
		for _, h := range hs {
			if _, err := io.WriteString(h.in, key+"\n"); err != nil {
				t.Fatal(err)
			}
		}
		total := 0
		for i, h := range hs {
			f := strings.Fields(h.line(t))
			if len(f) != 3 || f[0] != key || f[2] != "0" {
				t.Fatalf("round %d, process %d said %q, want %q, the admitted count and no failure", r, i, f, key)
			}
			n, _ := strconv.Atoi(f[1])
			total += n
		}
		if total != raceBudget {
			t.Errorf("round %d: %d admitted in total, want exactly %d", r, total, raceBudget)
		}
	}
}

// TestKilledProcessLosesNoCommittedCount: a counting process killed with
// SIGKILL loses no count it had committed, and the file stays usable.
func TestKilledProcessLosesNoCommittedCount(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	path := tempFile(t)
	h := startHelper(t, "kill", path)
	reported := map[string]int64{}
	for n := 0; n < 400; n++ {
		f := strings.Fields(h.line(t))
		c, _ := strconv.ParseInt(f[1], 10, 64)
		reported[f[0]] = max(reported[f[0]], c)
	}
	if err := h.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for h.out.Scan() { // what it reported before it died
		f := strings.Fields(h.out.Text())
		if len(f) == 2 {
			c, _ := strconv.ParseInt(f[1], 10, 64)
			reported[f[0]] = max(reported[f[0]], c)
		}
	}
	_ = h.cmd.Wait()

	db := openDB(t, path)
	var check string
	if err := db.QueryRow("PRAGMA integrity_check").Scan(&check); err != nil || check != "ok" {
		t.Fatalf("integrity_check = %q, %v", check, err)
	}
	s := open(t, path, sqlite.Options{})
	hd := handle(t, s, "race:")
	ctx := context.Background()
	for g := range killKeys {
		key := "kill-" + strconv.Itoa(g)
		stored := readCount(t, hd, key)
		// One goroutine per key: at most one count was committed and not
		// yet reported when the process died.
		if stored < reported[key] || stored > reported[key]+1 {
			t.Errorf("%s: %d in the file, %d reported: a committed count was lost", key, stored, reported[key])
		}
		tl, err := hd.Count(ctx, []string{key}, []store.Budget{{Limit: 1 << 40, Window: time.Hour}}, 1)
		if err != nil || tl.Counts[0] != stored+1 {
			t.Errorf("%s: counting after the kill: %+v, %v; want %d", key, tl, err, stored+1)
		}
	}
}
