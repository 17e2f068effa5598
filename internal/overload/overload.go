// Package overload holds what the guard of package store and the module's
// stores share about overload: the causes of an overloaded answer, and the
// contexts that tell how a call waits its turn.
package overload

import (
	"context"
	"errors"
)

// Why a call that waited for a slot was answered unavailable.
var (
	// ErrQueueFull is the cause of the overloaded answer given at once to a
	// call that finds its handle's queue full.
	ErrQueueFull = errors.New("too many calls waiting for the store")
	// ErrWaitedOut is the cause of the overloaded answer given to a call
	// whose deadline passed while it waited for a slot.
	ErrWaitedOut = errors.New("deadline passed while waiting for the store")
)

type patientKey struct{}

// Patient returns a context under which a call waits for a slot as long as
// ctx lasts, rather than the store's deadline. It is for a call whose only
// exact answer is the store's: it waits within its request's own deadline.
// It still needs a place in its handle's queue (see
// store.Options.MaxQueued), and in the backend has no more than the
// store's deadline.
func Patient(ctx context.Context) context.Context {
	return context.WithValue(ctx, patientKey{}, true)
}

// IsPatient reports whether ctx came from [Patient].
func IsPatient(ctx context.Context) bool { return ctx.Value(patientKey{}) != nil }

type noWaitKey struct{}

// NoWait returns a context under which a store call waits for no slot. It
// runs when a slot is free at once, and is answered overloaded
// ([ErrQueueFull]) when the store is busy. It is for a call that something
// else can make later, so that its caller is never held behind a busy
// store. A call also [Vouched] for still waits its turn in the vouched
// queue: no flood is ahead of it there.
func NoWait(ctx context.Context) context.Context {
	return context.WithValue(ctx, noWaitKey{}, true)
}

// IsNoWait reports whether ctx came from NoWait.
func IsNoWait(ctx context.Context) bool { return ctx.Value(noWaitKey{}) != nil }

type vouchedKey struct{}

// Vouched returns a context under which a store call waits for a slot in a
// queue of its own, shared only with other vouched calls. Queues take
// slots in turn, so strangers' calls, however many, delay it by one turn.
// It waits so even under [NoWait]: a vouched credit lands at once, and a
// known device is never refused by its own successes not yet given back.
func Vouched(ctx context.Context) context.Context {
	return context.WithValue(ctx, vouchedKey{}, true)
}

// IsVouched reports whether ctx came from Vouched.
func IsVouched(ctx context.Context) bool { return ctx.Value(vouchedKey{}) != nil }
