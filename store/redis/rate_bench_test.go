package redis_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"

	"github.com/gatecount/gatecount/internal/benchload"
	"github.com/gatecount/gatecount/limiter"
)

// BenchmarkVersusRedisRate runs, on one Redis and one client, from 8
// callers at once, one allowed decision per call: go-redis/redis_rate's
// AllowN (GCRA, one script), a one-key limiter Attempt on this store, and a
// bare INCR, the floor of one round trip. Each runs on one hot key and on
// random keys (uniform over 2^20 keys, so nearly every call starts a new
// entry; INCR on 1,024 keys). The budgets are large enough that every
// decision admits. BENCHMARKS.md runs it six times, interleaved:
//
//	for i in 1 2 3 4 5 6; do
//	  go test -run '^$' -bench VersusRedisRate -count 1 ./store/redis/
//	done
func BenchmarkVersusRedisRate(b *testing.B) {
	const conc = 8
	ctx := context.Background()
	rateLimit := redis_rate.Limit{Rate: limiter.MaxLimit, Burst: limiter.MaxLimit, Period: time.Minute}
	budget := limiter.Budget{Limit: limiter.MaxLimit, Window: time.Minute}
	for _, keys := range []string{"hot", "random"} {
		key := func(r *rand.Rand) string {
			if keys == "hot" {
				return "hot"
			}
			return strconv.Itoa(r.IntN(keySpace))
		}
		b.Run(keys+"/redis_rate", func(b *testing.B) {
			rl := redis_rate.NewLimiter(newClient(b))
			base := randomName("rate") + ":"
			benchload.Run(b, conc, func(r *rand.Rand) error {
				res, err := rl.AllowN(ctx, base+key(r), rateLimit, 1)
				if err == nil && res.Allowed != 1 {
					return fmt.Errorf("redis_rate refused: %+v", res)
				}
				return err
			})
		})
		b.Run(keys+"/gatecount", func(b *testing.B) {
			h, _ := benchHandle(b)
			l, err := limiter.New(h, limiter.Options{Name: "bench", Budget: budget})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { l.Close() })
			benchload.Run(b, conc, func(r *rand.Rand) error {
				d, err := l.Attempt(ctx, key(r))
				if err == nil && !d.Allowed {
					return fmt.Errorf("gatecount refused: %+v", d)
				}
				return err
			})
		})
		b.Run(keys+"/incr", func(b *testing.B) {
			c := newClient(b)
			base := "gatecount-bench:" + randomName("incr") + ":"
			b.Cleanup(func() {
				names := make([]string, 0, 1024)
				for i := range 1024 {
					names = append(names, base+strconv.Itoa(i))
				}
				c.Del(context.Background(), names...)
			})
			benchload.Run(b, conc, func(r *rand.Rand) error {
				k := base + "0"
				if keys == "random" {
					k = base + strconv.Itoa(r.IntN(1024))
				}
				return c.Incr(ctx, k).Err()
			})
		})
	}
}
