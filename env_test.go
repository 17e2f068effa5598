package gatecount_test

import (
	"context"
	"errors"
	"log/slog"
	"os/exec"
	"strings"
	"testing"

	"github.com/gatecount/gatecount"
	"github.com/gatecount/gatecount/config"
)

// This test binary imports no store package: a shared store the
// environment chooses is refused with an error naming the import to add.
func TestFromEnvWithoutTheDriver(t *testing.T) {
	for _, tc := range []struct{ variable, url, pkg string }{
		{"DATABASE_URL", "postgres://u:pa55word@127.0.0.1/db", "github.com/gatecount/gatecount/store/postgres"},
		{"DATABASE_URL", "sqlite:./limits.db", "github.com/gatecount/gatecount/store/sqlite"},
		{"RATE_LIMIT_STORE_URL", "redis://127.0.0.1:6379/0", "github.com/gatecount/gatecount/store/redis"},
	} {
		env := map[string]string{tc.variable: tc.url, "GATECOUNT_SECRET": strings.Repeat("s", 32)}
		lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
		_, err := gatecount.FromEnv(context.Background(), gatecount.WithLookup(lookup), gatecount.WithLogger(slog.New(slog.DiscardHandler)))
		if !errors.Is(err, config.ErrNoDriver) || !strings.Contains(err.Error(), `import _ "`+tc.pkg+`"`) || strings.Contains(err.Error(), "pa55word") {
			t.Errorf("%s=%s: %v, want an error naming the import of %s", tc.variable, tc.url, err, tc.pkg)
		}
	}
}

// Neither the module root nor config links a store's driver: an app links
// pgx, go-redis or SQLite only when it imports their store.
func TestNoDriverLinked(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/gatecount/gatecount", "github.com/gatecount/gatecount/config").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, driver := range []string{"github.com/jackc/pgx", "github.com/redis/go-redis", "modernc.org/sqlite", "github.com/gatecount/gatecount/store/postgres", "github.com/gatecount/gatecount/store/redis", "github.com/gatecount/gatecount/store/sqlite"} {
			if strings.HasPrefix(dep, driver) {
				t.Errorf("the root package or config links %s", dep)
			}
		}
	}
}
