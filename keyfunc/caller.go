package keyfunc

import (
	"context"
	"net/http"
)

// callerIDKey is the context key under which WithCallerID stores the ID.
type callerIDKey struct{}

// WithCallerID returns a copy of ctx carrying the authenticated caller ID id.
// The application's authentication middleware calls it once the caller is
// known, before the rate-limiting middleware runs.
func WithCallerID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, callerIDKey{}, id)
}

// CallerID is a Func keyed by the caller ID in the request context (see
// [WithCallerID]). When the context holds no caller ID, or an empty one, it
// returns an error matching [ErrNoCallerID] and [ErrNoKey].
//
// A caller-keyed limiter must treat a missing caller ID as an error, and
// the middleware rejects such requests. Falling back to "unlimited" would
// let any request that slips past authentication, or reaches the limiter
// before it, go unlimited.
func CallerID(r *http.Request) (string, error) {
	id, _ := r.Context().Value(callerIDKey{}).(string)
	if id == "" {
		return "", ErrNoCallerID
	}
	return id, nil
}
