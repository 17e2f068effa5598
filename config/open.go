package config

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/memory"
	"github.com/gatecount/gatecount/store/storekit"
)

// ErrNoDriver is matched by the error Open returns for a store whose
// package the program does not import (see the package doc).
var ErrNoDriver = storekit.ErrNoDriver

// Opened is a store opened by Open, with what it was opened over.
type Opened struct {
	// Store is the opened store. Handles come from it.
	Store *store.Store
	// Kind is the store's kind.
	Kind Kind
	// release frees what Open opened beneath the store, such as a
	// connection pool, after the store is closed.
	release func() error
}

// Close closes the store and then what Open opened beneath it.
func (o *Opened) Close() error {
	err := o.Store.Close()
	if o.release != nil {
		err = errors.Join(err, o.release())
	}
	return err
}

// drivers names, for each kind of shared store, the variable whose URL
// chooses it and the package that registers its URL schemes.
var drivers = map[Kind]struct{ variable, pkg string }{
	Postgres: {"DATABASE_URL", "github.com/gatecount/gatecount/store/postgres"},
	SQLite:   {"DATABASE_URL", "github.com/gatecount/gatecount/store/sqlite"},
	Redis:    {"RATE_LIMIT_STORE_URL", "github.com/gatecount/gatecount/store/redis"},
}

// Open opens the store c chooses, its guard configured by o: o.Logger
// receives its logs (nil means slog.Default()) and o.Observer, when set,
// hears of its calls. Opening the memory store for an app that has not said
// it runs one instance logs a warning of kind [KindMemoryNotShared]. A
// TRUSTED_PROXIES that trusts every address logs one of kind
// [KindTrustsEveryone]. A shared store opens through the driver its package
// registered: one the program does not import is an error matching
// [ErrNoDriver] that names the import to add.
func Open(ctx context.Context, c Config, o store.Options) (*Opened, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	log := o.Logger
	if c.MaxQueued > 0 {
		o.MaxQueued = c.MaxQueued
	}
	if c.MaxInFlight > 0 {
		o.MaxInFlight = c.MaxInFlight
	}
	warnTrustsEveryone(c, log)
	warnEveryone(c, log)
	var opened *Opened
	switch c.Store {
	case Memory:
		opened = &Opened{Store: memory.New(memory.Options{Store: o, MaxEntries: c.MaxEntries}), Kind: Memory}
		if !c.SingleInstance {
			log.Warn("rate limits count in this process's memory: on N instances every budget is multiplied by N. "+
				"Set DATABASE_URL or RATE_LIMIT_STORE_URL to share counts, or RATE_LIMIT_SINGLE_INSTANCE=true if the app runs one instance.",
				"kind", KindMemoryNotShared)
		}
	case Postgres, SQLite, Redis:
		var err error
		if opened, err = openShared(ctx, c, o); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("%w: unknown store %q", ErrInvalid, c.Store)
	}
	log.Info("rate limit store opened", "kind", KindStoreOpened, "store", string(opened.Kind), "shared", opened.Store.Shared(), "instance", opened.Store.InstanceID().String())
	return opened, nil
}

func openShared(ctx context.Context, c Config, o store.Options) (*Opened, error) {
	d := drivers[c.Store]
	url := c.DatabaseURL
	if d.variable == "RATE_LIMIT_STORE_URL" {
		url = c.StoreURL
		if url == "" {
			d.variable, url = "REDIS_URL", c.RedisURL
		}
	}
	s, release, err := storekit.OpenURL(ctx, url, storekit.URLOptions{
		Secret:        c.Secret,
		MaxEntries:    c.MaxEntries,
		AllowEviction: c.RedisAllowEviction,
		Store:         o,
	})
	switch {
	case errors.Is(err, storekit.ErrNoDriver):
		scheme, _, _ := strings.Cut(url, ":")
		return nil, fmt.Errorf("config: %s names a %s store (scheme %q), and this program does not link its driver: add import _ %q: %w",
			d.variable, c.Store, scheme, d.pkg, storekit.ErrNoDriver)
	case errors.Is(err, storekit.ErrMayEvict):
		return nil, fmt.Errorf("config: %s: %w (RATE_LIMIT_REDIS_ALLOW_EVICTION=true accepts it)", d.variable, err)
	case err != nil:
		return nil, fmt.Errorf("config: %s: %w", d.variable, err)
	}
	return &Opened{Store: s, Kind: c.Store, release: release}, nil
}
