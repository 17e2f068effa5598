package postgres

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/storekit"
)

// A database that cannot be reached is said once, with where it was tried
// and why, and matches store.ErrUnavailable.
func TestOpenURLUnreachable(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"postgres://nope.invalid", `cannot connect to nope.invalid:5432 as user and database`},
		{"postgres://u:pa55word@nope.invalid/db", `as user "u", database "db": host "nope.invalid" not found`},
		{"postgresql://u@127.0.0.1:1/db?connect_timeout=5", `cannot connect to 127.0.0.1:1 as user "u", database "db": `},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, _, err := storekit.OpenURL(ctx, tc.url, storekit.URLOptions{Secret: testSecret})
		cancel()
		var ce *ConnectError
		if !errors.As(err, &ce) || !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a *ConnectError saying %s", tc.url, err, tc.want)
			continue
		}
		if strings.Contains(err.Error(), "pa55word") || strings.Count(err.Error(), "nope.invalid") > 2 || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %q repeats itself or shows the password", tc.url, err)
		}
	}
}

// A migrated database opens from its URL; release closes the pool after
// the store.
func TestOpenURL(t *testing.T) {
	newPool(t) // reachable and migrated, or skipped
	s, release, err := storekit.OpenURL(context.Background(), testURL(), storekit.URLOptions{Secret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	h, err := s.Handle(randomPrefix("url"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Count(context.Background(), []string{"k"}, []store.Budget{{Limit: 1, Window: time.Minute}}, 1); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if release == nil || release() != nil {
		t.Fatal("no release of the pool")
	}
}
