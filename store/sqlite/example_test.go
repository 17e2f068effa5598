package sqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/sqlite"
)

// Every process on the host that opens the file shares the counts.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "gatecount-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "limits.db")

	// Once, from the app's migrate command.
	db, err := sql.Open("sqlite", path)
	if err != nil {
		log.Fatal(err)
	}
	if err := sqlite.Migrate(ctx, db); err != nil {
		log.Fatal(err)
	}
	db.Close()

	// In each process.
	s, err := sqlite.Open(ctx, path, sqlite.Options{
		Secret: []byte("an app secret of at least 32 bytes, from the environment"),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	signIn, err := s.Handle("signin:")
	if err != nil {
		log.Fatal(err)
	}
	budget := []store.Budget{{Limit: 3, Window: 15 * time.Minute}}
	for range 4 {
		t, err := signIn.Count(ctx, []string{"alice@example.com"}, budget, 1)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(t.Allowed, t.Counts[0])
	}
	fmt.Println("shared:", s.Shared())
	// Output:
	// true 1
	// true 2
	// true 3
	// false 3
	// shared: true
}

// A DATABASE_URL of sqlite: or file: selects the SQLite store.
func ExampleParseURL() {
	for _, u := range []string{"sqlite:/var/lib/app/limits.db", "file:///var/lib/app/limits.db", "postgres://db.internal/app"} {
		path, err := sqlite.ParseURL(u)
		fmt.Printf("%q %v\n", path, err)
	}
	// Output:
	// "/var/lib/app/limits.db" <nil>
	// "/var/lib/app/limits.db" <nil>
	// "" sqlite: not an sqlite: or file: URL: "postgres://db.internal/app"
}
