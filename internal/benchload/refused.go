package benchload

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/store"
)

// Refused runs, at concurrency 8 on 1,000 keys that l has spent in h, a
// Count the store refuses (store/c8) next to l's Attempt (memory/c8). The
// limiter's process memory answers the Attempt without a store call. Only
// one attempt per key every limiter.AskAgain asks the store again. Each run
// spends the keys just before it, as an attacker's flood follows the
// refusals. l counts one attempt an hour in h.
func Refused(b *testing.B, h *store.Handle, l *limiter.Limiter) {
	const conc, keys = 8, 1000
	ctx := context.Background()
	budget := []store.Budget{{Limit: 1, Window: time.Hour}}
	spend := func(b *testing.B) {
		for i := range keys {
			if _, err := l.Attempt(ctx, strconv.Itoa(i)); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("store/c8", func(b *testing.B) {
		spend(b)
		Run(b, conc, func(r *rand.Rand) error {
			_, err := h.Count(ctx, []string{strconv.Itoa(r.IntN(keys))}, budget, 1)
			return err
		})
	})
	b.Run("memory/c8", func(b *testing.B) {
		spend(b)
		Run(b, conc, func(r *rand.Rand) error {
			d, err := l.Attempt(ctx, strconv.Itoa(r.IntN(keys)))
			if err == nil && d.Allowed {
				return fmt.Errorf("a spent key admitted: %+v", d)
			}
			return err
		})
	})
}
