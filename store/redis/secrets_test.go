package redis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gatecount/gatecount/store"
	redisstore "github.com/gatecount/gatecount/store/redis"
)

// TestCheckSecret: a store whose secret wrote none of the live entries,
// while another's did, is told from one that holds entries of its own.
func TestCheckSecret(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	app := open(t, c, redisstore.Options{Secret: newSecret()})
	b := []store.Budget{{Limit: 5, Window: time.Minute}}
	if _, err := handle(t, app, randomName("secret")).Count(ctx, []string{"alice"}, b, 1); err != nil {
		t.Fatal(err)
	}
	if err := app.CheckSecret(ctx); err != nil {
		t.Fatalf("CheckSecret of the secret that wrote a live entry: %v", err)
	}
	other := open(t, c, redisstore.Options{Secret: newSecret()})
	err := other.CheckSecret(ctx)
	var se *store.SecretError
	if !errors.Is(err, store.ErrSecretMismatch) || !errors.As(err, &se) || se.Other == "" || se.Own != other.Backend().(*redisstore.Backend).Fingerprint() {
		t.Fatalf("CheckSecret of a secret with no live entries: %v; want a *SecretError naming both fingerprints", err)
	}
	if _, err := handle(t, other, randomName("secret")).Count(ctx, []string{"bob"}, b, 1); err != nil {
		t.Fatal(err)
	}
	if err := other.CheckSecret(ctx); err != nil {
		t.Fatalf("CheckSecret once the second secret wrote an entry, as during a rotation: %v", err)
	}
}
