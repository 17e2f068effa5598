package main

import (
	"context"

	"github.com/gatecount/gatecount/store/sqlite"
)

func init() {
	migrators["sqlite"] = migrateSQLite
	migrators["file"] = migrateSQLite
}

// migrateSQLite runs sqlite.MigrateFile on the file url names.
func migrateSQLite(ctx context.Context, url string) error {
	path, err := sqlite.ParseURL(url)
	if err != nil {
		return err
	}
	return sqlite.MigrateFile(ctx, path)
}
