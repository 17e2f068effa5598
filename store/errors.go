package store

import (
	"errors"
	"fmt"
)

// ErrUnavailable is matched, through errors.Is, by every error that says the
// store could not answer: it timed out, was overloaded, full, down or
// closed. It never means that a limit was reached; what an unavailable
// store means for a request is the caller's choice.
var ErrUnavailable = errors.New("store: unavailable")

// ErrInvalidValue is matched by the error returned when apply leaves a
// value that is not JSON or is longer than [MaxValueSize]. Nothing is
// written.
var ErrInvalidValue = errors.New("store: invalid value")

// errNotJSON is the error of a value that is not JSON, answered without
// allocation.
var errNotJSON = fmt.Errorf("%w: not JSON", ErrInvalidValue)

// ErrInvalidKey is matched by the error of a call with no keys, more than
// [MaxKeys] keys, an empty key, a key longer than [MaxKeyLen] bytes, or the
// same key twice. [Store.Handle] answers it too, for an empty prefix or one
// longer than [MaxPrefixLen] bytes.
var ErrInvalidKey = errors.New("store: invalid key")

// ErrStoreReuse is matched by the *[ReuseError] a second Claim of a Handle
// returns: one handle must back exactly one limiter.
var ErrStoreReuse = errors.New("store: handle already claimed by another limiter")

// ErrDuplicateName is matched by the *[NameError] a Claim returns when
// another handle of the same store is claimed by a limiter of that name.
var ErrDuplicateName = errors.New("store: limiter name already used on this store")

// ErrDuplicatePrefix is returned when a second handle with the same prefix
// is asked for on one backing. Two limiters counting under one prefix would
// each count every attempt of the other: the double-count mistake.
var ErrDuplicatePrefix = errors.New("store: prefix already has a handle on this backing")

// Reason tells why a store was unavailable.
type Reason uint8

// The reasons a store can be unavailable.
const (
	// ReasonDown: the store failed or could not be reached, or the
	// handle's breaker was open ([ErrBreakerOpen]).
	ReasonDown Reason = iota + 1
	// ReasonDeadline: the call did not finish within the guard's deadline.
	ReasonDeadline
	// ReasonOverloaded: the call waited for a slot under the guard's
	// in-flight bound until its deadline passed, or found its handle's
	// queue of waiting calls full. A backend answers it for waits of its
	// own: for a connection of a pool, say. The store itself may be
	// healthy.
	ReasonOverloaded
	// ReasonFull: the store holds MaxEntries live entries and had no room
	// for a new key.
	ReasonFull
	// ReasonClosed: the store was closed.
	ReasonClosed
)

// String returns the reason's name as it appears in logs and errors.
func (r Reason) String() string {
	switch r {
	case ReasonDown:
		return "down"
	case ReasonDeadline:
		return "deadline"
	case ReasonOverloaded:
		return "overloaded"
	case ReasonFull:
		return "full"
	case ReasonClosed:
		return "closed"
	}
	return fmt.Sprintf("Reason(%d)", uint8(r))
}

// UnavailableError is the error of a store that could not answer. It
// matches [ErrUnavailable] through errors.Is; errors.As tells its Reason.
type UnavailableError struct {
	Reason Reason
	// Err is the underlying failure, if any.
	Err error
}

// Error describes the failure.
func (e *UnavailableError) Error() string {
	if e.Err == nil {
		return "store: unavailable (" + e.Reason.String() + ")"
	}
	return "store: unavailable (" + e.Reason.String() + "): " + e.Err.Error()
}

// Is reports whether target is [ErrUnavailable].
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }

// Unwrap returns the underlying failure.
func (e *UnavailableError) Unwrap() error { return e.Err }

// ReasonOf returns the reason err says the store was unavailable, or 0 when
// err is not an unavailable error.
func ReasonOf(err error) Reason {
	switch e := err.(type) {
	case nil:
		return 0
	case *UnavailableError:
		return e.Reason
	}
	var u *UnavailableError
	if errors.As(err, &u) {
		return u.Reason
	}
	return 0
}

// Errors answered without allocation on hot paths.
var (
	errClosed = &UnavailableError{Reason: ReasonClosed}
	// ErrFull is the error a store returns when it has no room for a new
	// key. Stores return it (or wrap it) so that every store reports a full
	// bound the same way.
	ErrFull error = &UnavailableError{Reason: ReasonFull}
)

// ReuseError is returned by [Handle.Claim] when the handle already serves
// another limiter. It names both claimants.
type ReuseError struct {
	Prefix string
	First  string
	Second string
}

// Error names the handle and both claimants.
func (e *ReuseError) Error() string {
	return fmt.Sprintf("store: handle %q is claimed by %q and cannot also serve %q: give each limiter its own handle", e.Prefix, e.First, e.Second)
}

// Is reports whether target is [ErrStoreReuse].
func (e *ReuseError) Is(target error) bool { return target == ErrStoreReuse }

// NameError is returned by [Handle.Claim] when another handle of the store
// serves a limiter of the same name. It names the name and both prefixes.
type NameError struct {
	Name   string
	First  string // prefix of the handle that has the name
	Second string // prefix of the handle refused it
}

// Error names the limiter name and both handles.
func (e *NameError) Error() string {
	return fmt.Sprintf("store: limiter name %q is taken on this store by the handle %q, so the handle %q cannot use it: give each limiter its own name", e.Name, e.First, e.Second)
}

// Is reports whether target is [ErrDuplicateName].
func (e *NameError) Is(target error) bool { return target == ErrDuplicateName }
