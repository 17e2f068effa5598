// Command gatecount administers gatecount's shared limit stores.
//
// Usage:
//
//	DATABASE_URL=postgres://user@host/db go run github.com/gatecount/gatecount/cmd/gatecount migrate
//
// The migrate command creates or upgrades the store's tables in the database
// DATABASE_URL names. It is idempotent and safe to run from several
// instances at once, for PostgreSQL directly or through a pooler in any
// mode (each migration is one transaction under a transaction-scoped
// advisory lock); one that waits more than postgres.MigrationLockTimeout
// (30 s) for another gives up with an error saying so. The URL's scheme
// chooses the store: postgres:// and postgresql:// for PostgreSQL,
// sqlite:PATH and file:PATH for SQLite.
//
// Exit status: 0 on success, 1 when the command failed, 2 on a usage error.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"time"
)

// migrators migrate the store of a database URL scheme and return the
// schema version it had before and has after. Each store's file registers
// its schemes in an init function.
var migrators = map[string]func(ctx context.Context, url string) (from, to int, err error){}

// migrateTimeout bounds one migrate command.
const migrateTimeout = 5 * time.Minute

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func usage(w io.Writer) {
	fmt.Fprintf(w, `usage: gatecount <command>

commands:
  migrate   create or upgrade the limit store's tables in DATABASE_URL
            (schemes: %s)
`, strings.Join(schemes(), ", "))
}

func schemes() []string {
	var out []string
	for s := range migrators {
		out = append(out, s+":")
	}
	slices.Sort(out)
	return out
}

// run runs the command named in args and returns the exit status.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) != 1 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "migrate":
		return migrate(ctx, getenv("DATABASE_URL"), stdout, stderr)
	case "help", "-h", "-help", "--help":
		usage(stdout)
		return 0
	}
	fmt.Fprintf(stderr, "gatecount: unknown command %q\n", args[0])
	usage(stderr)
	return 2
}

func migrate(ctx context.Context, url string, stdout, stderr io.Writer) int {
	if url == "" {
		fmt.Fprintln(stderr, "gatecount: migrate: set DATABASE_URL to the database to migrate")
		return 2
	}
	scheme, _, ok := strings.Cut(url, ":")
	m := migrators[strings.ToLower(scheme)]
	if !ok || m == nil {
		// The URL may hold a password: name only its scheme.
		fmt.Fprintf(stderr, "gatecount: migrate: DATABASE_URL has scheme %q; want one of %s\n", scheme, strings.Join(schemes(), ", "))
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, migrateTimeout)
	defer cancel()
	from, to, err := m(ctx, url)
	if err != nil {
		fmt.Fprintf(stderr, "gatecount: migrate: %v\n", err)
		return 1
	}
	fmt.Fprintln(stdout, "gatecount: migrate: "+migrated(from, to))
	return 0
}

// migrated says what a migration from schema version from to to did.
func migrated(from, to int) string {
	switch {
	case from >= to:
		return fmt.Sprintf("the limit store was already at schema version %d: nothing to do", from)
	case from == 0:
		return fmt.Sprintf("created the limit store's tables (schema version %d)", to)
	}
	return fmt.Sprintf("upgraded the limit store from schema version %d to %d", from, to)
}
