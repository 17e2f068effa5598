package storekit

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/gatecount/gatecount/store"
)

// OpenURL opens a URL through the opener registered for its scheme, in any
// letter case; an unknown scheme is ErrNoDriver, naming the scheme and not
// the rest of the URL; a scheme registered twice panics at start-up.
func TestRegisterURL(t *testing.T) {
	var got URLOptions
	var gotURL string
	RegisterURL("Test-Scheme", func(_ context.Context, url string, o URLOptions) (*store.Store, func() error, error) {
		gotURL, got = url, o
		return nil, nil, errors.New("opened")
	})
	if !slices.Contains(Schemes(), "test-scheme") {
		t.Fatalf("Schemes() = %v", Schemes())
	}
	_, _, err := OpenURL(context.Background(), "TEST-SCHEME://h/x", URLOptions{MaxEntries: 7})
	if err == nil || err.Error() != "opened" || gotURL != "TEST-SCHEME://h/x" || got.MaxEntries != 7 {
		t.Fatalf("OpenURL: %v, url %q, options %+v", err, gotURL, got)
	}
	for _, url := range []string{"nosuch://u:pa55word@h/db", "no-colon-at-all", ""} {
		_, _, err := OpenURL(context.Background(), url, URLOptions{})
		if !errors.Is(err, ErrNoDriver) || strings.Contains(err.Error(), "pa55word") {
			t.Errorf("OpenURL(%q): %v, want ErrNoDriver without the password", url, err)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("a second RegisterURL of one scheme did not panic")
		}
	}()
	RegisterURL("test-scheme", func(context.Context, string, URLOptions) (*store.Store, func() error, error) { return nil, nil, nil })
}
