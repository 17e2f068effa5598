package config

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/memory"
	"github.com/gatecount/gatecount/store/postgres"
	redisstore "github.com/gatecount/gatecount/store/redis"
	"github.com/gatecount/gatecount/store/sqlite"
)

// KindMemoryNotShared is the "kind" of the warning Open logs when it opens
// the memory store for an app that has not said it runs one instance.
const KindMemoryNotShared = "limit-store-not-shared"

// Opened is a store opened by Open, with what it was opened over.
type Opened struct {
	// Store is the opened store. Handles come from it.
	Store *store.Store
	// Kind is the store's kind.
	Kind Kind
	// closers release what Open opened beneath the store, such as a
	// connection pool, after the store is closed.
	closers []func() error
}

// Close closes the store and then what Open opened beneath it.
func (o *Opened) Close() error {
	errs := []error{o.Store.Close()}
	for i := len(o.closers) - 1; i >= 0; i-- {
		errs = append(errs, o.closers[i]())
	}
	return errors.Join(errs...)
}

// Open opens the store c chooses, logging which to log (nil means
// slog.Default()). Opening the memory store for an app that has not said it
// runs one instance logs a warning of kind KindMemoryNotShared; a
// TRUSTED_PROXIES that trusts every address logs one of kind
// KindTrustsEveryone.
func Open(ctx context.Context, c Config, log *slog.Logger) (*Opened, error) {
	if log == nil {
		log = slog.Default()
	}
	warnTrustsEveryone(c, log)
	so := store.Options{Logger: log}
	var (
		o   *Opened
		err error
	)
	switch c.Store {
	case Memory:
		o = &Opened{Store: memory.New(memory.Options{Store: so, MaxEntries: c.MaxEntries}), Kind: Memory}
		if !c.SingleInstance {
			log.Warn("rate limits count in this process's memory: on N instances every budget is multiplied by N. "+
				"Set DATABASE_URL or RATE_LIMIT_STORE_URL to share counts, or RATE_LIMIT_SINGLE_INSTANCE=true if the app runs one instance.",
				"kind", KindMemoryNotShared)
		}
	default:
		o, err = openShared(ctx, c, so)
	}
	if err != nil {
		return nil, err
	}
	log.Info("rate limit store opened", "kind", "limit-store-opened", "store", string(o.Kind), "shared", o.Store.Shared(), "instance", o.Store.InstanceID().String())
	return o, nil
}

func openShared(ctx context.Context, c Config, so store.Options) (*Opened, error) {
	switch c.Store {
	case Postgres:
		return openPostgres(ctx, c, so)
	case SQLite:
		path, err := sqlite.ParseURL(c.DatabaseURL)
		if err != nil {
			return nil, fmt.Errorf("config: DATABASE_URL: %w", err)
		}
		// The file is the app's own: its table is created when it opens.
		s, err := sqlite.Open(ctx, path, sqlite.Options{Secret: c.Secret, MaxEntries: c.MaxEntries, AutoMigrate: true, Store: so})
		if err != nil {
			return nil, fmt.Errorf("config: SQLite store: %w", err)
		}
		return &Opened{Store: s, Kind: SQLite}, nil
	case Redis:
		s, err := redisstore.OpenURL(ctx, c.StoreURL, redisstore.Options{Secret: c.Secret, MaxEntries: c.MaxEntries, AllowEviction: c.RedisAllowEviction, Store: so})
		if errors.Is(err, redisstore.ErrEvicting) {
			return nil, fmt.Errorf("config: RATE_LIMIT_STORE_URL: %w (RATE_LIMIT_REDIS_ALLOW_EVICTION=true accepts it)", err)
		}
		if err != nil {
			return nil, fmt.Errorf("config: RATE_LIMIT_STORE_URL: %w", err)
		}
		return &Opened{Store: s, Kind: Redis}, nil
	}
	return nil, fmt.Errorf("%w: unknown store %q", ErrInvalid, c.Store)
}

// openPostgres opens a pool on DATABASE_URL and the store over it. The
// database must have been migrated (go run ./cmd/gatecount migrate).
func openPostgres(ctx context.Context, c Config, so store.Options) (*Opened, error) {
	pool, err := pgxpool.New(ctx, c.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("config: DATABASE_URL: %w", err)
	}
	s, err := postgres.New(ctx, pool, postgres.Options{Secret: c.Secret, MaxEntries: c.MaxEntries, Store: so})
	if err != nil {
		pool.Close()
		if errors.Is(err, postgres.ErrNotMigrated) {
			return nil, fmt.Errorf("config: %w (run: go run ./cmd/gatecount migrate)", err)
		}
		return nil, fmt.Errorf("config: PostgreSQL store: %w", err)
	}
	return &Opened{Store: s, Kind: Postgres, closers: []func() error{func() error { pool.Close(); return nil }}}, nil
}
