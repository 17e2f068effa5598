package postgres

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/storekit"
)

// Importing the package registers the schemes postgres: and postgresql:
// with storekit.OpenURL, and so with package config's DATABASE_URL. A pool is
// opened on the URL, which must name a migrated database, and closed after
// the store.
func init() {
	storekit.RegisterURL("postgres", openURL)
	storekit.RegisterURL("postgresql", openURL)
}

// DefaultPoolConns is the least number of connections of the pool opened
// for a URL that does not set pool_max_conns. Counts of single keys share a
// connection in batches, so the guard's in-flight bound (64 calls by
// default) needs far fewer. A call that waits for a connection past its
// deadline is answered overloaded, as one that waits in the guard's queue.
// Sixteen leaves room for six instances in PostgreSQL's default
// max_connections of 100.
const DefaultPoolConns = 16

func openURL(ctx context.Context, url string, o storekit.URLOptions) (*store.Store, func() error, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, nil, fmt.Errorf("postgres: %w", err) // pgx hides the password
	}
	if !strings.Contains(url, "pool_max_conns") {
		cfg.MaxConns = max(cfg.MaxConns, DefaultPoolConns)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("postgres: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, nil, connectError(cfg, err)
	}
	s, err := New(ctx, pool, Options{Secret: o.Secret, MaxEntries: o.MaxEntries, Store: o.Store})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return s, func() error { pool.Close(); return nil }, nil
}

// ConnectError is a failure to reach the database a URL names. Its message
// says where it tried and why, once; Unwrap gives pgx's own error.
type ConnectError struct {
	Host     string // host:port
	User     string
	Database string
	// Implied reports that the URL named neither user nor database, so
	// that they are the defaults: the name of the process's OS user.
	Implied bool
	Err     error
}

// Error says where the connection was tried and why it failed.
func (e *ConnectError) Error() string {
	who := fmt.Sprintf("as user %q, database %q", e.User, e.Database)
	if e.Implied {
		who = fmt.Sprintf("as user and database %q (the URL names neither: the OS user's name)", e.User)
	}
	return fmt.Sprintf("postgres: cannot connect to %s %s: %s", e.Host, who, cause(e.Err))
}

// Unwrap returns pgx's error.
func (e *ConnectError) Unwrap() error { return e.Err }

// Is reports whether target is [store.ErrUnavailable]: the database did not
// answer.
func (e *ConnectError) Is(target error) bool { return target == store.ErrUnavailable }

func connectError(cfg *pgxpool.Config, err error) error {
	cc := cfg.ConnConfig
	db := cc.Database
	if db == "" {
		db = cc.User // what the server assumes
	}
	implied := cc.Database == "" && cfg.ConnString() != "" && !strings.Contains(cfg.ConnString(), "@") && !strings.Contains(cfg.ConnString(), "user=")
	return &ConnectError{Host: net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port))), User: cc.User, Database: db, Implied: implied, Err: err}
}

// cause is the reason under pgx's layers of a connection error, said once:
// pgx's own message repeats the lookup or dial error of each attempt.
func cause(err error) string {
	var dns *net.DNSError
	if errors.As(err, &dns) {
		if dns.IsNotFound {
			return fmt.Sprintf("host %q not found", dns.Name)
		}
		return dns.Error()
	}
	for {
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			if next := u.Unwrap(); next != nil {
				err = next
				continue
			}
		case interface{ Unwrap() []error }:
			if errs := u.Unwrap(); len(errs) > 0 {
				err = errs[0]
				continue
			}
		}
		return err.Error()
	}
}
