package sqlite

import (
	"context"

	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/storekit"
)

// Importing the package registers the schemes sqlite: and file: with
// storekit.OpenURL (and so with package config's DATABASE_URL): the file
// ParseURL names is opened, created if need be, and migrated.
func init() {
	storekit.RegisterURL("sqlite", openURL)
	storekit.RegisterURL("file", openURL)
}

func openURL(ctx context.Context, url string, o storekit.URLOptions) (*store.Store, func() error, error) {
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
