package config_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/gatecount/gatecount/config"
	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/store"

	_ "github.com/gatecount/gatecount/store/sqlite" // lets DATABASE_URL=sqlite:… open
)

// An app reads the store's settings with Parse, then opens the store;
// real apps pass os.LookupEnv.
func Example() {
	dir, _ := os.MkdirTemp("", "gatecount-example")
	defer os.RemoveAll(dir)
	env := map[string]string{
		"DATABASE_URL":     "sqlite:" + filepath.Join(dir, "limits.db"),
		"GATECOUNT_SECRET": "an-example-secret-of-at-least-32-bytes",
		"TRUSTED_PROXIES":  "10.0.0.0/8",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }

	c, err := config.Parse(lookup)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("store:", c.Store, "proxies:", c.IP().TrustedProxies)

	opened, err := config.Open(context.Background(), c, store.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer opened.Close()
	fmt.Println("opened:", opened.Kind, "shared:", opened.Store.Shared())
	// Output:
	// store: sqlite proxies: [10.0.0.0/8]
	// opened: sqlite shared: true
}

// An app reads its own variables, such as its routes' budgets, with the
// checks of Parse: here API_PER_MINUTE, "30" or "30,sliding".
func ExampleVars() {
	v := config.NewVars(os.LookupEnv)
	api := v.Budget("API_PER_MINUTE", limiter.Budget{Limit: 30, Window: time.Minute})
	if err := v.Err(); err != nil {
		log.Fatal(err)
	}
	fmt.Println("api:", api)
	// Output: api: 30 per 1m0s
}

// A bad setting stops start-up with one error naming every variable at
// fault, and never a password.
func ExampleParse_errors() {
	env := map[string]string{
		"DATABASE_URL":           "mysql://app:hunter2@db/app?password=hunter2",
		"RATE_LIMIT_STORE":       "database",
		"TRUSTED_PROXIES":        "10.0.0.0/8,banana",
		"RATE_LIMIT_MAX_ENTRIES": "lots",
	}
	_, err := config.Parse(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	fmt.Println(err)
	// Output:
	// RATE_LIMIT_MAX_ENTRIES="lots": want a whole number from 1 to 100000000
	// TRUSTED_PROXIES="10.0.0.0/8,banana": want a comma-separated list of CIDRs such as 10.0.0.0/8,2001:db8::/32 (keyfunc: invalid option: network element 2 "banana": ParseAddr("banana"): unable to parse IP)
	// DATABASE_URL="mysql://app:xxxxx@db/app?password=xxxxx": want a postgres://, postgresql://, sqlite: or file: URL
}
