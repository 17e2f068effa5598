package limiter

import (
	"reflect"
	"testing"
	"time"

	"github.com/gatecount/gatecount/store"
)

// decideKey, the one-key Attempt's path, decides exactly what decide does
// from the same count as a Tally.
func TestDecideKeyMatchesDecide(t *testing.T) {
	now := time.UnixMilli(1_900_000_000_000)
	end := time.UnixMilli(1_900_000_060_000)
	c := store.Budget{Limit: 3, Window: time.Minute}
	for _, tc := range []struct {
		name string
		t    store.Tally
	}{
		{"allowed", store.Tally{Allowed: true, Now: now, Limiting: -1, Counts: [store.MaxCountKeys]int64{1}, ExpiresAt: [store.MaxCountKeys]time.Time{end}}},
		{"allowed to its cap", store.Tally{Allowed: true, Now: now, Limiting: -1, Counts: [store.MaxCountKeys]int64{3}, ExpiresAt: [store.MaxCountKeys]time.Time{end}}},
		{"refused", store.Tally{Now: now, Limiting: 0, Counts: [store.MaxCountKeys]int64{3}, ExpiresAt: [store.MaxCountKeys]time.Time{end}}},
		{"refused past its cap", store.Tally{Now: now, Limiting: 0, Counts: [store.MaxCountKeys]int64{9}, ExpiresAt: [store.MaxCountKeys]time.Time{end}}},
		{"refused with no window", store.Tally{Now: now, Limiting: 0}},
	} {
		var want, got Decision
		decide(&tc.t, []string{"k"}, []store.Budget{c}, false, &want)
		decideKey(tc.t.Key(), "k", c, &got)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: decideKey gave\n%+v\ndecide\n%+v", tc.name, got, want)
		}
	}
}
