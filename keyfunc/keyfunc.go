package keyfunc

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// Func derives a rate-limit key from a request.
//
// It returns a non-empty key, or an error that matches [ErrNoKey] (via
// [errors.Is]) when the request carries no usable key. A Func must be safe
// for concurrent use. Funcs that read the request body restore it, so the
// handler still sees the original body.
type Func func(r *http.Request) (string, error)

// ErrNoKey reports that a request carries no usable key. Every error returned
// by a Func of this package matches ErrNoKey; the more specific sentinels
// below match it too. A limiter must treat it as a reason to reject the
// request, never as a reason to skip limiting.
var ErrNoKey = errors.New("keyfunc: request carries no usable key")

// noKeyError is a sentinel error that is a more specific kind of ErrNoKey.
type noKeyError string

// Error returns the message.
func (e noKeyError) Error() string { return string(e) }

// Unwrap makes every noKeyError match ErrNoKey.
func (e noKeyError) Unwrap() error { return ErrNoKey }

// Sentinel errors. Each matches [ErrNoKey] as well as itself.
var (
	// ErrNoCallerID reports that the request context holds no caller ID.
	ErrNoCallerID error = noKeyError("keyfunc: no caller ID in request context")

	// ErrValueTooLong reports a header or body field value over its bound.
	ErrValueTooLong error = noKeyError("keyfunc: key value too long")

	// ErrBodyTooLarge reports a body that does not fit in the read bound, so
	// that the field cannot be extracted safely.
	ErrBodyTooLarge error = noKeyError("keyfunc: request body exceeds read bound")

	// ErrUnsupportedMediaType reports a body whose Content-Type the Func does
	// not parse.
	ErrUnsupportedMediaType error = noKeyError("keyfunc: unsupported request media type")

	// ErrMalformedBody reports a body that does not parse, repeats the field,
	// or holds a field value that is not a string.
	ErrMalformedBody error = noKeyError("keyfunc: malformed request body")

	// ErrInvalidAccount reports an account name that cannot be normalised.
	ErrInvalidAccount error = noKeyError("keyfunc: invalid account name")

	// ErrBadForwarding reports a forwarding header from a trusted proxy that
	// is oversized or malformed, so that the client address is unknown.
	ErrBadForwarding error = noKeyError("keyfunc: malformed or oversized forwarding header")
)

// ErrInvalidOption reports invalid configuration passed to a constructor,
// such as an out-of-range IPv6 prefix length or a malformed trusted-proxy
// list. A Func built from invalid configuration returns errors matching both
// ErrInvalidOption and [ErrNoKey].
var ErrInvalidOption = errors.New("keyfunc: invalid option")

// misconfigured returns a Func that always fails with ErrInvalidOption.
func misconfigured(what string) Func {
	err := fmt.Errorf("%w: %s (%w)", ErrInvalidOption, what, ErrNoKey)
	return func(*http.Request) (string, error) { return "", err }
}

// JoinKeys encodes parts into one key such that distinct part lists always
// give distinct keys. Each part is written as its length in bytes in
// decimal, a colon, and the part itself. So JoinKeys("a|b", "c") is
// "3:a|b1:c" and JoinKeys("a", "b|c") is "1:a3:b|c". JoinKeys() is the
// empty string.
func JoinKeys(parts ...string) string {
	n := 0
	for _, p := range parts {
		n += decimalDigits(len(p)) + 1 + len(p)
	}
	var b strings.Builder
	b.Grow(n) // the one allocation: String returns these bytes
	var digits [20]byte
	for _, p := range parts {
		b.Write(strconv.AppendInt(digits[:0], int64(len(p)), 10))
		b.WriteByte(':')
		b.WriteString(p)
	}
	return b.String()
}

// decimalDigits returns how many digits n ≥ 0 has in decimal.
func decimalDigits(n int) int {
	d := 1
	for ; n >= 10; n /= 10 {
		d++
	}
	return d
}

// Join returns a Func whose key combines the keys of funcs, in order, with
// [JoinKeys]. If any part fails, Join fails with that error wrapped with the
// part's position; the error still matches [ErrNoKey] and the part's sentinel.
// Join with no funcs, or with a nil Func, returns a Func that always fails
// with [ErrInvalidOption].
func Join(funcs ...Func) Func {
	if len(funcs) == 0 {
		return misconfigured("Join needs at least one Func")
	}
	for i, f := range funcs {
		if f == nil {
			return misconfigured(fmt.Sprintf("Join part %d is nil", i+1))
		}
	}
	fs := append([]Func(nil), funcs...)
	return func(r *http.Request) (string, error) {
		parts := make([]string, len(fs))
		for i, f := range fs {
			k, err := f(r)
			if err != nil {
				return "", fmt.Errorf("keyfunc: join part %d of %d: %w", i+1, len(fs), asNoKey(err))
			}
			parts[i] = k
		}
		return JoinKeys(parts...), nil
	}
}

// asNoKey makes sure err matches ErrNoKey, as the Func contract promises,
// even when it comes from a Func outside this package.
func asNoKey(err error) error {
	if errors.Is(err, ErrNoKey) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrNoKey, err)
}
