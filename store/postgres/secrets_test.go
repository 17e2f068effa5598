package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gatecount/gatecount/store"
)

// TestCheckSecret: a store whose secret wrote none of the live rows, while
// another's did, is told from one that holds rows of its own. The table is
// shared with other tests, so other secrets' rows are always there.
func TestCheckSecret(t *testing.T) {
	pool := newPool(t)
	ctx := context.Background()
	app := newStore(t, pool, Options{Secret: randomSecret()})
	if _, err := newHandle(t, app, "secret").Count(ctx, []string{"alice"}, []store.Budget{{Limit: 5, Window: time.Minute}}, 1); err != nil {
		t.Fatal(err)
	}
	if err := app.CheckSecret(ctx); err != nil {
		t.Fatalf("CheckSecret of the secret that wrote a live row: %v", err)
	}
	other := newStore(t, pool, Options{Secret: randomSecret()})
	err := other.CheckSecret(ctx)
	var se *store.SecretError
	if !errors.Is(err, store.ErrSecretMismatch) || !errors.As(err, &se) || se.Other == "" || se.Other == se.Own || se.Own != other.Backend().(*Backend).Fingerprint() {
		t.Fatalf("CheckSecret of a secret with no live rows: %v; want a *SecretError naming both fingerprints", err)
	}
	if _, err := newHandle(t, other, "secret").Count(ctx, []string{"bob"}, []store.Budget{{Limit: 5, Window: time.Minute}}, 1); err != nil {
		t.Fatal(err)
	}
	if err := other.CheckSecret(ctx); err != nil {
		t.Fatalf("CheckSecret once the second secret wrote a row, as during a rotation: %v", err)
	}
}
