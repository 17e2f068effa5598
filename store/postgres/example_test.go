package postgres_test

import (
	"context"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/postgres"
)

// The app opens its pool, migrates once (or runs
// `go run github.com/gatecount/gatecount/cmd/gatecount migrate`), and opens
// the store over the same pool with its secret. The
// store reads no environment: the app passes what it read (package config
// reads GATECOUNT_SECRET and DATABASE_URL and does all of this).
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := postgres.Migrate(ctx, pool); err != nil {
		log.Fatal(err)
	}
	s, err := postgres.New(ctx, pool, postgres.Options{Secret: []byte(os.Getenv("GATECOUNT_SECRET"))})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	signIn, err := s.Handle("signin:")
	if err != nil {
		log.Fatal(err)
	}
	t, err := signIn.Count(ctx, []string{"alice@example.com"}, []store.Budget{{Limit: 5, Window: 15 * time.Minute}}, 1)
	if err != nil {
		log.Printf("limit store unavailable: %v", err)
		return
	}
	log.Printf("allowed: %v, %d of 5 used", t.Allowed, t.Counts[0])
}
