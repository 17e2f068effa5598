package loadtest

import (
	"context"
	"flag"
	"os"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/gatecount/gatecount/internal/servicetest"
)

// long turns on the full-size fault runs, as GATECOUNT_LONG=1 does.
var long = flag.Bool("long", false, "run the full-size fault runs (also GATECOUNT_LONG=1)")

func isLong() bool { return *long || servicetest.IsLong() }

// pick returns short or, for the full-size runs, full.
func pick[T any](short, full T) T {
	if isLong() {
		return full
	}
	return short
}

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			println("goleak:", err.Error())
			code = 1
		}
	}
	os.Exit(code)
}

// built is the example server, built once for every test that needs it.
var built struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

// serverBin returns the example server's binary, building it on first use.
func serverBin(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "loadtest-bin-"); built.err != nil {
			return
		}
		built.bin, built.err = Build(context.Background(), built.dir)
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.bin
}
