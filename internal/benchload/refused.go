package benchload

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"testing"
)

// Refused runs, at concurrency 8 on 1,000 keys that attempt has spent, a
// count the store refuses (store/c8) next to a limiter's attempt
// (memory/c8). count counts one on key in the store the limiter counts in,
// with a budget of 1 an hour; attempt is the limiter's Attempt on key, of
// that budget too. The limiter's process memory answers the attempt without
// a store call, but for one attempt per key now and then. Each run spends
// the keys just before it, as an attacker's flood follows the refusals.
func Refused(b *testing.B, count func(ctx context.Context, key string) error, attempt func(ctx context.Context, key string) (allowed bool, err error)) {
	const conc, keys = 8, 1000
	ctx := context.Background()
	spend := func(b *testing.B) {
		for i := range keys {
			if _, err := attempt(ctx, strconv.Itoa(i)); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("store/c8", func(b *testing.B) {
		spend(b)
		Run(b, conc, func(r *rand.Rand) error {
			return count(ctx, strconv.Itoa(r.IntN(keys)))
		})
	})
	b.Run("memory/c8", func(b *testing.B) {
		spend(b)
		Run(b, conc, func(r *rand.Rand) error {
			allowed, err := attempt(ctx, strconv.Itoa(r.IntN(keys)))
			if err == nil && allowed {
				return errors.New("a spent key admitted")
			}
			return err
		})
	})
}
