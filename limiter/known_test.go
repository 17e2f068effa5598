package limiter

import (
	"testing"
	"time"

	"github.com/gatecount/gatecount/store"
)

// What memory holds of a key reads back as written, and anything else is
// refused, never misread.
func TestKnownRoundTrip(t *testing.T) {
	exp := time.Now().Add(time.Minute)
	for _, k := range []known{
		{},
		{seen: 3, alone: 2, asked: 1796140875371, sending: 1, flying: 12, win: 1796140935366, given: 4, mine: 5},
		{seen: 100000, flying: 7},
		{seen: 4, alone: 1, asked: 1796140875371, win: 1796140935366, next: 1796140880000, alg: 2, limit: 10, windowMs: 60000, burst: 20},
	} {
		e := store.Entry{ExpiresAt: exp}
		k.put(&e)
		got, err := knownOf(&e)
		if err != nil || got != k {
			t.Errorf("%+v written as %s read back as %+v, %v", k, e.Value, got, err)
		}
	}
	for _, v := range []string{`3`, `[1,2,3,4,5,6,7]`, `[1,2,3,4,5,6,7,8,9]`, `[1,2,x,4,5,6,7,8]`, `[1,,3,4,5,6,7,8]`, `[1,2,3,4,5,6,7,9999999999999999999]`, `[1,-2,3,4,5,6,7,8]`, `[]`} {
		e := store.Entry{Value: []byte(v), ExpiresAt: exp}
		if k, err := knownOf(&e); err == nil {
			t.Errorf("memory holding %s read as %+v, want an error", v, k)
		}
	}
}
