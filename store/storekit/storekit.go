// Package storekit is what the module's stores share beyond the store
// contract: the constructor path, the bound on live entries, the answer to
// a wait that ran out of time, and the registry of URL schemes. Each store
// package registers its schemes from an init function; package config
// opens the URL of its environment through [OpenURL]. A store author
// outside the module needs none of it.
package storekit

import (
	"fmt"
	"log/slog"

	"github.com/gatecount/gatecount/internal/overload"
	"github.com/gatecount/gatecount/store"
)

// Build is the constructor path every store shares: it gives *o its
// defaults, then calls newBackend (which reads them) and puts the backend
// behind the guard with them.
func Build[B store.Backend](o *store.Options, newBackend func() (B, error)) (*store.Store, error) {
	*o = o.WithDefaults()
	b, err := newBackend()
	if err != nil {
		return nil, err
	}
	return store.New(b, *o), nil
}

// WaitedOut returns the answer to a call whose context ended, with err,
// while it waited for what. That may be a connection of a pool, a writer, a
// batch, or the turn of its keys. A wait is overload, never a failure: the
// error matches [overload.ErrWaitedOut] and has [store.ReasonOverloaded].
// So the call neither opens the breaker nor lets an attempt through
// uncounted.
func WaitedOut(what string, err error) error {
	return &store.UnavailableError{Reason: store.ReasonOverloaded, Err: fmt.Errorf("%w: for %s: %w", overload.ErrWaitedOut, what, err)}
}

// LoggerFor returns the logger of a store named name: o.Logger, or
// slog.Default when nil, with the attribute store=name.
func LoggerFor(o store.Options, name string) *slog.Logger {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	return log.With("store", name)
}
