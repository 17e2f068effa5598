package redis

import (
	"context"
	"errors"

	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/storekit"
)

// Importing the package registers the schemes redis: and rediss: with
// storekit.OpenURL (and so with package config's RATE_LIMIT_STORE_URL): the
// store OpenURL opens.
func init() {
	storekit.RegisterURL("redis", openURL)
	storekit.RegisterURL("rediss", openURL)
}

func openURL(ctx context.Context, url string, o storekit.URLOptions) (*store.Store, func() error, error) {
	s, err := OpenURL(ctx, url, Options{Secret: o.Secret, MaxEntries: o.MaxEntries, AllowEviction: o.AllowEviction, Store: o.Store})
	if errors.Is(err, ErrEvicting) {
		err = mayEvict{err}
	}
	if err != nil {
		return nil, nil, err
	}
	return s, nil, nil
}

// mayEvict is an ErrEvicting error that matches storekit.ErrMayEvict too, so
// that a caller that does not link this package can tell it.
type mayEvict struct{ error }

// Unwrap returns the ErrEvicting error.
func (e mayEvict) Unwrap() error { return e.error }

// Is reports whether target is storekit.ErrMayEvict.
func (e mayEvict) Is(target error) bool { return target == storekit.ErrMayEvict }
