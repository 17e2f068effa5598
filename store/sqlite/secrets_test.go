package sqlite_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/sqlite"
)

// TestCheckSecret: an empty file matches any secret; once secret A wrote a
// live row, B is a mismatch until it writes one of its own.
func TestCheckSecret(t *testing.T) {
	path := tempFile(t)
	ctx := context.Background()
	a := open(t, path, sqlite.Options{Secret: secretA})
	b := open(t, path, sqlite.Options{Secret: secretB})
	for _, s := range []*store.Store{a, b} {
		if err := s.CheckSecret(ctx); err != nil {
			t.Fatalf("CheckSecret of an empty file: %v", err)
		}
	}
	budget := []store.Budget{{Limit: 5, Window: time.Minute}}
	if _, err := handle(t, a, "secret:").Count(ctx, []string{"alice"}, budget, 1); err != nil {
		t.Fatal(err)
	}
	if err := a.CheckSecret(ctx); err != nil {
		t.Fatalf("CheckSecret of the secret that wrote a live row: %v", err)
	}
	err := b.CheckSecret(ctx)
	var se *store.SecretError
	fpA := a.Backend().(*sqlite.Backend).Fingerprint()
	if !errors.Is(err, store.ErrSecretMismatch) || !errors.As(err, &se) || se.Other != fpA || se.Own != b.Backend().(*sqlite.Backend).Fingerprint() {
		t.Fatalf("CheckSecret of B with only A's row live: %v; want a *SecretError naming A's fingerprint %s", err, fpA)
	}
	if _, err := handle(t, b, "secret:").Count(ctx, []string{"bob"}, budget, 1); err != nil {
		t.Fatal(err)
	}
	if err := b.CheckSecret(ctx); err != nil {
		t.Fatalf("CheckSecret once B wrote a row, as during a rotation: %v", err)
	}
}
