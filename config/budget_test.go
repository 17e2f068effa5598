package config

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gatecount/gatecount/limiter"
)

// A budget variable sets the limit and, optionally, the algorithm; a bad
// value is refused with an error saying what the variable takes.
func TestBudgetVariable(t *testing.T) {
	def := limiter.Budget{Limit: 5, Window: 15 * time.Minute}
	for _, c := range []struct {
		v    string
		want limiter.Budget
		err  string // in the error; "" for none
	}{
		{"7", limiter.Budget{Limit: 7, Window: 15 * time.Minute}, ""},
		{"7,fixed", limiter.Budget{Limit: 7, Window: 15 * time.Minute}, ""},
		{"7,sliding", limiter.Budget{Limit: 7, Window: 15 * time.Minute, Algorithm: limiter.SlidingWindow}, ""},
		{" 7 , Sliding ", limiter.Budget{Limit: 7, Window: 15 * time.Minute, Algorithm: limiter.SlidingWindow}, ""},
		{"7,bucket", limiter.Budget{Limit: 7, Window: 15 * time.Minute, Algorithm: limiter.TokenBucket}, ""},
		{"7,bucket:20", limiter.Budget{Limit: 7, Window: 15 * time.Minute, Burst: 20, Algorithm: limiter.TokenBucket}, ""},
		{"257,sliding", def, "at most 256"},
		{"7,sliding:3", def, "5,bucket:20"},
		{"7,bucket:0", def, "5,bucket:20"},
		{"7,bucket:", def, "5,bucket:20"},
		{"7,", def, "5,sliding"},
		{"7,gcra", def, "5,sliding"},
		{"7,sliding,bucket", def, "5,sliding"},
		{"0", def, "from 1 to"},
		{"-3,bucket", def, "from 1 to"},
		{"5/15m", def, "from 1 to"},
	} {
		var r reader
		r.lookup = func(string) (string, bool) { return c.v, true }
		got := r.budget("RATE_LIMIT_X", def)
		err := errors.Join(r.errs...)
		switch {
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("%q: %+v, %v; want %+v", c.v, got, err, c.want)
		case c.err != "" && (!errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.err) || got != def):
			t.Errorf("%q: %+v, %v; want the default and an error naming %q", c.v, got, err, c.err)
		}
	}
}

// FuzzBudgetVariable: no value makes the parser panic; what it accepts is a
// budget a limiter takes, which formatBudget writes back as a value it reads
// the same.
func FuzzBudgetVariable(f *testing.F) {
	for _, s := range []string{"5", "5,sliding", "5,bucket", "5,bucket:20", "257,sliding", "5,", ",", "5,bucket:-1", "1073741824", " 5 ,FIXED", "5,bucket:1073741825"} {
		f.Add(s)
	}
	def := limiter.Budget{Limit: 5, Window: time.Hour}
	f.Fuzz(func(t *testing.T, v string) {
		b, err := parseBudget(v, def)
		if err != nil {
			if b != def {
				t.Fatalf("%q refused, returned %+v, not the default", v, b)
			}
			return
		}
		if err := b.Validate(); err != nil {
			t.Fatalf("%q accepted as %+v, which a limiter refuses: %v", v, b, err)
		}
		back, err := parseBudget(formatBudget(b), def)
		if err != nil || back != b {
			t.Fatalf("%q read as %+v, written %q, read back %+v, %v", v, b, formatBudget(b), back, err)
		}
	})
}
