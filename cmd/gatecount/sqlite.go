package main

import (
	"context"

	"github.com/gatecount/gatecount/store/sqlite"
)

func init() {
	migrators["sqlite"] = migrateSQLite
	migrators["file"] = migrateSQLite
}

// migrateSQLite runs sqlite.MigrateFile on the file url names and returns
// the schema version it had before and has after.
func migrateSQLite(ctx context.Context, url string) (from, to int, err error) {
	path, err := sqlite.ParseURL(url)
	if err != nil {
		return 0, 0, err
	}
	if from, err = sqlite.MigrateFile(ctx, path); err != nil {
		return 0, 0, err
	}
	return from, sqlite.SchemaVersion, nil
}
