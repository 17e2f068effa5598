package sqlite

import (
	"context"

	"github.com/gatecount/gatecount/internal/storeurl"
	"github.com/gatecount/gatecount/store"
)

// Importing the package registers the schemes sqlite: and file: with
// storeurl.OpenURL (and so with package config's DATABASE_URL): the file
// ParseURL names is opened, created if need be, and migrated.
func init() {
	storeurl.RegisterURL("sqlite", openURL)
	storeurl.RegisterURL("file", openURL)
}

func openURL(ctx context.Context, url string, o storeurl.URLOptions) (*store.Store, func() error, error) {
	path, err := ParseURL(url)
	if err != nil {
		return nil, nil, err
	}
	// The file is the app's own: its table is created when it opens.
	s, err := Open(ctx, path, Options{Secret: o.Secret, MaxEntries: o.MaxEntries, AutoMigrate: true, Store: o.Store})
	if err != nil {
		return nil, nil, err
	}
	return s, nil, nil
}
