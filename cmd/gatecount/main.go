// Command gatecount administers gatecount's shared limit stores.
//
// Usage:
//
//	DATABASE_URL=postgres://user@host/db go run github.com/gatecount/gatecount/cmd/gatecount migrate
//
// The migrate command creates or upgrades the store's tables in the
// database DATABASE_URL names. It is idempotent and safe to run from
// several instances at once, for PostgreSQL directly or through a pooler in
// any mode. Each migration is one transaction under a transaction-scoped
// advisory lock. One that waits more than postgres.MigrationLockTimeout (30
// s) for another gives up with an error saying so. The URL's scheme chooses
// the store: postgres:// and postgresql:// for PostgreSQL, sqlite:PATH and
// file:PATH for SQLite.
//
// The unlock, show and reset commands act on the counts of a running app's
// limiters, in the store the app's environment names (DATABASE_URL or
// RATE_LIMIT_STORE_URL, with GATECOUNT_SECRET):
//
//	gatecount unlock -account NAME [-ip ADDR]... [-limiter NAME] [-json]
//	gatecount show -account NAME [-ip ADDR]... [-limiter NAME] [-json]
//	gatecount show -limiter NAME -key KEY [-json]
//	gatecount reset -limiter NAME -key KEY [-json]
//
// -account acts on the sign-in guard named login, or the one -limiter
// names, with the budgets of RATE_LIMIT_LOGIN_*. -key acts on one key of
// any limiter. A change reaches every instance within about a second. A
// secret the store's live entries were not written under is an error, never
// a silent reset of nothing.
//
// Exit status: 0 on success, 1 when the command failed (a store it cannot
// reach, a secret that does not match), 2 on a usage error.
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
	fmt.Fprintf(w, `usage: gatecount <command> [flags]

commands:
  migrate   create or upgrade the limit store's tables in DATABASE_URL
            (schemes: %s)
  unlock    -account NAME [-ip ADDR]... [-limiter NAME] [-json]
            let an account sign in again, from every address named too
  show      -account NAME [-ip ADDR]... [-limiter NAME] [-json]
            each budget's count, limit and reset, and whether it refuses now
  show      -limiter NAME -key KEY [-json]
            one key's count and reset, in any limiter
  reset     -limiter NAME -key KEY [-json]
            forget one key's count, in any limiter

unlock, show and reset read the app's DATABASE_URL or RATE_LIMIT_STORE_URL,
GATECOUNT_SECRET and RATE_LIMIT_LOGIN_*; -account acts on the sign-in guard
named %s unless -limiter names another.
`, strings.Join(schemes(), ", "), defaultSignIn)
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
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "migrate":
		if len(args) != 1 {
			usage(stderr)
			return 2
		}
		return migrate(ctx, getenv("DATABASE_URL"), stdout, stderr)
	case "unlock", "show", "reset":
		return operate(ctx, args[0], args[1:], getenv, stdout, stderr)
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
