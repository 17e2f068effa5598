package storekit_test

import (
	"context"
	"testing"

	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/storekit"
)

// TestBuildGivesDefaults: Build hands the backend constructor the options
// with their defaults, and a constructor's error comes back with no store.
func TestBuildGivesDefaults(t *testing.T) {
	var o store.Options
	_, err := storekit.Build(&o, func() (store.Backend, error) {
		if o != o.WithDefaults() {
			t.Error("the constructor saw options without their defaults")
		}
		return nil, context.Canceled
	})
	if err != context.Canceled {
		t.Fatalf("Build = %v, want the constructor's error", err)
	}
}
