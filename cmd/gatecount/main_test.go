package main

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func testURL() string {
	if u := os.Getenv("GATECOUNT_TEST_POSTGRES_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/test"
}

func TestRun(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		url  string
		code int
		out  string // in stdout or stderr
	}{
		{"no command", nil, "", 2, "usage"},
		{"unknown", []string{"frobnicate"}, "", 2, "unknown command"},
		{"help", []string{"help"}, "", 0, "migrate"},
		{"no url", []string{"migrate"}, "", 2, "set DATABASE_URL"},
		{"unknown scheme", []string{"migrate"}, "mysql://u:secretpw@h/db", 2, `scheme "mysql"`},
		{"bad url", []string{"migrate"}, "postgres://%zz", 1, "parse DATABASE_URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			getenv := func(k string) string {
				if k == "DATABASE_URL" {
					return tc.url
				}
				return ""
			}
			code := run(context.Background(), tc.args, getenv, &out, &errOut)
			all := out.String() + errOut.String()
			if code != tc.code || !strings.Contains(all, tc.out) {
				t.Fatalf("run(%q) = %d, %q; want %d and %q", tc.args, code, all, tc.code, tc.out)
			}
			if strings.Contains(all, "secretpw") {
				t.Fatalf("output reveals the URL's password: %q", all)
			}
		})
	}
}

// TestMigratePostgres migrates the test database (idempotent: it may be
// migrated already).
func TestMigratePostgres(t *testing.T) {
	url := testURL()
	if _, _, err := migratePostgres(context.Background(), url); err != nil {
		if os.Getenv("CI") != "true" && strings.Contains(err.Error(), "connect") {
			t.Skipf("PostgreSQL at %s is unreachable: %v", url, err)
		}
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	getenv := func(k string) string {
		if k == "DATABASE_URL" {
			return url
		}
		return ""
	}
	if code := run(context.Background(), []string{"migrate"}, getenv, &out, &errOut); code != 0 {
		t.Fatalf("migrate: exit %d: %s", code, errOut.String())
	}
	if want := "already at schema version"; !strings.Contains(out.String(), want) {
		t.Fatalf("migrate of a migrated database said %q, want %q", out.String(), want)
	}
}

// What migrate says depends on what it did: created, upgraded, nothing.
func TestMigratedMessage(t *testing.T) {
	for _, tc := range []struct {
		from, to int
		want     string
	}{
		{0, 2, "created the limit store's tables (schema version 2)"},
		{1, 2, "upgraded the limit store from schema version 1 to 2"},
		{2, 2, "the limit store was already at schema version 2: nothing to do"},
	} {
		if got := migrated(tc.from, tc.to); got != tc.want {
			t.Errorf("migrated(%d, %d) = %q, want %q", tc.from, tc.to, got, tc.want)
		}
	}
}

// TestMigrateSQLite creates the table in a new file, twice over.
func TestMigrateSQLite(t *testing.T) {
	url := "sqlite:" + t.TempDir() + "/limits.db"
	getenv := func(k string) string {
		if k == "DATABASE_URL" {
			return url
		}
		return ""
	}
	for _, want := range []string{"created the limit store's tables", "already at schema version"} {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), []string{"migrate"}, getenv, &out, &errOut); code != 0 {
			t.Fatalf("migrate: %d %s", code, errOut.String())
		}
		if !strings.Contains(out.String(), want) {
			t.Fatalf("migrate said %q, want %q", out.String(), want)
		}
	}
}

// On a new database, migrate says it created the tables; run again, that
// there was nothing to do.
func TestMigrateNewPostgresDatabase(t *testing.T) {
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, testURL())
	if err != nil {
		if os.Getenv("CI") != "true" {
			t.Skipf("PostgreSQL is unreachable: %v", err)
		}
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	name := fmt.Sprintf("gatecount_fresh_%d", time.Now().UnixNano())
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	defer admin.Exec(context.WithoutCancel(ctx), "DROP DATABASE "+name+" WITH (FORCE)")
	u, err := url.Parse(testURL())
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	getenv := func(k string) string {
		if k == "DATABASE_URL" {
			return u.String()
		}
		return ""
	}
	for _, want := range []string{"created the limit store's tables", "already at schema version"} {
		var out, errOut bytes.Buffer
		if code := run(ctx, []string{"migrate"}, getenv, &out, &errOut); code != 0 {
			t.Fatalf("migrate: exit %d: %s", code, errOut.String())
		}
		if !strings.Contains(out.String(), want) {
			t.Fatalf("migrate said %q, want %q", out.String(), want)
		}
	}
}

// TestMigratePostgresPooler runs four migrate commands at once through
// PgBouncer in transaction mode (see .ci/pgbouncer.sh), with pgx's default
// mode and with exec: all succeed. Under CI=true a missing PgBouncer fails
// the test; otherwise it is skipped.
func TestMigratePostgresPooler(t *testing.T) {
	if _, _, err := migratePostgres(context.Background(), testURL()); err != nil {
		if os.Getenv("CI") != "true" && strings.Contains(err.Error(), "connect") {
			t.Skipf("PostgreSQL at %s is unreachable: %v", testURL(), err)
		}
		t.Fatal(err)
	}
	base := os.Getenv("GATECOUNT_TEST_PGBOUNCER_URL")
	if base == "" {
		base = "postgres://postgres@127.0.0.1:6432"
	}
	for _, query := range []string{"?sslmode=disable", "?sslmode=disable&default_query_exec_mode=exec"} {
		url := strings.TrimSuffix(base, "/") + "/gatecount_tx" + query
		t.Run(query, func(t *testing.T) {
			getenv := func(k string) string {
				if k == "DATABASE_URL" {
					return url
				}
				return ""
			}
			var wg sync.WaitGroup
			outs := make([]bytes.Buffer, 4)
			codes := make([]int, 4)
			for i := range codes {
				wg.Go(func() { codes[i] = run(context.Background(), []string{"migrate"}, getenv, &outs[i], &outs[i]) })
			}
			wg.Wait()
			for i, code := range codes {
				if code == 0 {
					continue
				}
				if os.Getenv("CI") != "true" && strings.Contains(outs[i].String(), "connect") {
					t.Skipf("PgBouncer at %s is unreachable (run .ci/pgbouncer.sh): %s", url, outs[i].String())
				}
				t.Fatalf("migrate %d through PgBouncer: exit %d: %s", i, code, outs[i].String())
			}
		})
	}
}
