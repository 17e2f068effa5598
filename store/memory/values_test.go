package memory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/memory"
	"github.com/gatecount/gatecount/store/value"
)

// The store keeps counts as numbers, yet every value reads back as the
// very JSON written, and Count and Update see one another's writes.
func TestValuesKeptExactly(t *testing.T) {
	ctx := context.Background()
	s := memory.New(memory.Options{})
	defer s.Close()
	h, err := s.Handle("v:")
	if err != nil {
		t.Fatal(err)
	}
	caps := []store.Budget{{Limit: 100, Window: time.Hour}}
	for _, tc := range []struct {
		value string
		count int64 // the count after one Count: 0 when refused, -1 when not a count
	}{
		{"0", 1},
		{"7", 8},
		{"9223372036854775806", 0}, // a count, with no room under the cap
		{"-3", -1},
		{"7.0", -1},
		{"1e3", -1},
		{`"7"`, -1},
		{`{"n":7}`, -1},
	} {
		key := []string{tc.value}
		err := h.Update(ctx, key, func(now time.Time, es []store.Entry) error {
			es[0] = store.Entry{Value: []byte(tc.value), ExpiresAt: now.Add(time.Hour)}
			return nil
		})
		if err != nil {
			t.Fatalf("%s: Update: %v", tc.value, err)
		}
		es, err := h.Read(ctx, key)
		if err != nil || string(es[0].Value) != tc.value {
			t.Fatalf("%s: Read gave %q, %v", tc.value, es[0].Value, err)
		}
		var seen string
		if err := h.Update(ctx, key, func(_ time.Time, es []store.Entry) error {
			seen = string(es[0].Value)
			return nil
		}); err != nil || seen != tc.value {
			t.Fatalf("%s: apply saw %q, %v", tc.value, seen, err)
		}
		tally, err := h.Count(ctx, key, caps, 1)
		switch {
		case tc.count < 0 && !errors.Is(err, store.ErrNotCounter):
			t.Errorf("%s: Count gave %v, want %v", tc.value, err, store.ErrNotCounter)
		case tc.count == 0 && (err != nil || tally.Allowed):
			t.Errorf("%s: Count gave %+v, %v, want refused", tc.value, tally, err)
		case tc.count > 0 && (err != nil || !tally.Allowed || tally.Counts[0] != tc.count):
			t.Errorf("%s: Count gave %+v, %v, want count %d", tc.value, tally, err, tc.count)
		}
		if tc.count > 0 {
			es, _ := h.Read(ctx, key)
			if want := value.AppendCount(nil, tc.count); string(es[0].Value) != string(want) {
				t.Errorf("%s: after Count, Read gave %q, want %q", tc.value, es[0].Value, want)
			}
		}
	}
}
