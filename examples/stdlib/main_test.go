package main

import (
	"context"
	"os"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/gatecount/gatecount/examples/internal/demotest"
	"github.com/gatecount/gatecount/internal/loadtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		for _, dir := range []string{built.dir, cli.dir} {
			if dir != "" {
				os.RemoveAll(dir)
			}
		}
		os.Exit(code)
	}))
}

// built is this example's server, built once for the tests that run it as
// a process of its own.
var built struct {
	once     sync.Once
	dir, bin string
	err      error
}

// serverBin returns the example's binary, building it on first use.
func serverBin(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "stdlib-bin-"); built.err != nil {
			return
		}
		built.bin, built.err = loadtest.Build(context.Background(), built.dir)
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.bin
}

// TestExample starts the example for real and checks its limits and its
// sign-in and password-reset routes.
func TestExample(t *testing.T) { demotest.CheckExample(t, routes) }
