package storekit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/gatecount/gatecount/store"
)

// URLOptions configure a store opened by [OpenURL].
type URLOptions struct {
	// Secret names keys (HMAC-SHA-256) in the stores that keep them out of
	// the clear; at least 32 bytes. Every instance sharing counts must use
	// the same one.
	Secret []byte
	// MaxEntries bounds the live entries; 0 means the store's default.
	MaxEntries int
	// AllowEviction accepts a server that may evict live entries (Redis
	// with a maxmemory-policy other than noeviction); stores that cannot
	// evict ignore it.
	AllowEviction bool
	// Store configures the guard.
	Store store.Options
}

// URLOpener opens a store from a URL of a scheme it was registered for.
// release, when not nil, frees what the opener made beneath the store (a
// connection pool), and is called after the store is closed.
type URLOpener func(ctx context.Context, url string, o URLOptions) (s *store.Store, release func() error, err error)

// ErrNoDriver is matched by the error [OpenURL] returns for a URL whose scheme
// no imported store package registered.
var ErrNoDriver = errors.New("store: no store registered for the URL's scheme")

// ErrMayEvict is matched by the error of a store opened over a server that
// may evict live entries, when URLOptions.AllowEviction is false. Such a
// server is a Redis whose maxmemory-policy is not noeviction. An evicted
// count frees the budget of whoever it counted.
var ErrMayEvict = errors.New("store: the server may evict live entries")

var drivers = struct {
	sync.RWMutex
	m map[string]URLOpener
}{m: map[string]URLOpener{}}

// RegisterURL makes [OpenURL] open URLs of scheme (such as "postgres") with
// open. Store packages call it from an init function, as database/sql
// drivers register themselves, so that a program links only the stores it
// imports. Registering a scheme twice panics, at start-up, as sql.Register
// does: it is a mistake in the program, never in its input.
func RegisterURL(scheme string, open URLOpener) {
	scheme = strings.ToLower(scheme)
	drivers.Lock()
	defer drivers.Unlock()
	if open == nil {
		panic("store: RegisterURL of a nil opener for " + scheme)
	}
	if _, dup := drivers.m[scheme]; dup {
		panic("store: RegisterURL called twice for the scheme " + scheme)
	}
	drivers.m[scheme] = open
}

// Schemes returns the URL schemes registered, sorted.
func Schemes() []string {
	drivers.RLock()
	defer drivers.RUnlock()
	var out []string
	for s := range drivers.m {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// OpenURL opens the store url names, by its scheme, with the opener a store
// package registered (see [RegisterURL]). A scheme nobody registered gives an
// error matching [ErrNoDriver] that names the scheme and never the rest of
// the URL, which may hold a password.
func OpenURL(ctx context.Context, url string, o URLOptions) (s *store.Store, release func() error, err error) {
	scheme, _, ok := strings.Cut(url, ":")
	scheme = strings.ToLower(scheme)
	drivers.RLock()
	open := drivers.m[scheme]
	drivers.RUnlock()
	if !ok || open == nil {
		registered := strings.Join(Schemes(), ", ")
		if registered == "" {
			registered = "none"
		}
		return nil, nil, fmt.Errorf("%w: %q (registered: %s)", ErrNoDriver, scheme, registered)
	}
	return open(ctx, url, o)
}

// RedactURL returns s with what in a URL could be a secret hidden, so that
// it can be quoted in an error. It hides the password of its user
// information and the values of its query string (?password=…). s need not
// parse as a URL.
func RedactURL(s string) string {
	if q := strings.IndexByte(s, '?'); q >= 0 {
		var kept []string
		for _, kv := range strings.Split(s[q+1:], "&") {
			k, _, _ := strings.Cut(kv, "=")
			kept = append(kept, k+"=xxxxx")
		}
		s = s[:q] + "?" + strings.Join(kept, "&")
	}
	at := strings.LastIndex(s, "@")
	scheme := strings.Index(s, "://")
	if at < 0 || scheme < 0 || at < scheme {
		return s
	}
	userinfo := s[scheme+3 : at]
	if i := strings.Index(userinfo, ":"); i >= 0 {
		return s[:scheme+3] + userinfo[:i] + ":xxxxx" + s[at:]
	}
	return s
}
