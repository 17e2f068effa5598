package redis_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"

	"github.com/gatecount/gatecount/internal/benchload"
	"github.com/gatecount/gatecount/limiter"
)

// BenchmarkVersusRedisRate runs, on one Redis, each on a client of its own
// with the same options, from 8 callers at once, one allowed decision per call: go-redis/redis_rate's
// AllowN (GCRA, one script), a one-key limiter Attempt on this store, and a
// bare INCR, the floor of one round trip. Each runs on one hot key and on
// random keys (uniform over 2^20 keys, so nearly every call starts a new
// entry; INCR on 1,024 keys). The budgets are large enough that every
// decision admits. It reports each one's ops/s and allocations;
// BenchmarkVersusRedisRateRatio, their ratio on a shared machine.
func BenchmarkVersusRedisRate(b *testing.B) {
	const conc = 8
	for _, keys := range []string{"hot", "random"} {
		for _, name := range contenders {
			b.Run(keys+"/"+name, func(b *testing.B) {
				op := contender(b, name, keys)
				benchload.Run(b, conc, op)
			})
		}
	}
}

// BenchmarkVersusRedisRateRatio runs the operations of
// BenchmarkVersusRedisRate in turn, in phases of ratioOps calls from 8
// callers each, one round of phases an iteration, and reports the median
// over the iterations of gatecount's throughput over redis_rate's, on the
// hot key and on random keys, with the median ops/s of each. The machine is
// shared: what slows one phase slows the next alike, where two separate
// benchmarks a minute apart see different loads. BENCHMARKS.md runs both
// six times, interleaved:
//
//	for i in 1 2 3 4 5 6; do
//	  go test -run '^$' -bench 'VersusRedisRate$' ./store/redis/
//	  go test -run '^$' -bench VersusRedisRateRatio -benchtime 10x ./store/redis/
//	done
func BenchmarkVersusRedisRateRatio(b *testing.B) {
	const conc, ratioOps = 8, 2000
	ops := map[string]func(r *rand.Rand) error{}
	for _, keys := range []string{"hot", "random"} {
		for _, name := range contenders {
			ops[keys+"/"+name] = contender(b, name, keys)
		}
	}
	rates := map[string][]float64{}
	ratios := map[string][]float64{}
	b.ResetTimer()
	for i := range b.N {
		for _, keys := range []string{"hot", "random"} {
			// Each goes first in turn.
			order := append(slices.Clone(contenders[i%len(contenders):]), contenders[:i%len(contenders)]...)
			got := map[string]float64{}
			for _, name := range order {
				r, err := phase(conc, ratioOps, ops[keys+"/"+name])
				if err != nil {
					b.Fatal(err)
				}
				got[name] = r
				rates[keys+"/"+name] = append(rates[keys+"/"+name], r)
			}
			for _, g := range []string{"gatecount", "gatecount-bucket"} {
				ratios[keys+"-"+g] = append(ratios[keys+"-"+g], got[g]/got["redis_rate"])
			}
		}
	}
	b.StopTimer()
	for _, keys := range []string{"hot", "random"} {
		for _, g := range []string{"gatecount", "gatecount-bucket"} {
			b.ReportMetric(median(ratios[keys+"-"+g]), keys+"-"+g+"/redis_rate")
		}
		for _, name := range contenders {
			b.ReportMetric(median(rates[keys+"/"+name]), keys+"-"+name+"-ops/s")
		}
	}
}

// contenders are the operations BenchmarkVersusRedisRate compares:
// gatecount with a fixed window and with a token bucket.
var contenders = []string{"redis_rate", "gatecount", "gatecount-bucket", "incr"}

// contender returns the operation name does, on the hot key or on random
// keys, each on a client of its own: one allowed decision per call.
func contender(b *testing.B, name, keys string) func(r *rand.Rand) error {
	ctx := context.Background()
	key := func(r *rand.Rand) string {
		if keys == "hot" {
			return "hot"
		}
		return strconv.Itoa(r.IntN(keySpace))
	}
	switch name {
	case "redis_rate":
		limit := redis_rate.Limit{Rate: limiter.MaxLimit, Burst: limiter.MaxLimit, Period: time.Minute}
		rl := redis_rate.NewLimiter(newClient(b))
		base := randomName("rate") + ":"
		return func(r *rand.Rand) error {
			res, err := rl.AllowN(ctx, base+key(r), limit, 1)
			if err == nil && res.Allowed != 1 {
				return fmt.Errorf("redis_rate refused: %+v", res)
			}
			return err
		}
	case "gatecount", "gatecount-bucket":
		h, _ := benchHandle(b)
		budget := limiter.Budget{Limit: limiter.MaxLimit, Window: time.Minute}
		if name == "gatecount-bucket" { // as large as a bucket may be: a unit a microsecond
			budget = limiter.Budget{Limit: 60_000_000, Window: time.Minute, Algorithm: limiter.TokenBucket}
		}
		l, err := limiter.New(h, limiter.Options{Name: "bench", Budget: budget})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { l.Close() })
		return func(r *rand.Rand) error {
			d, err := l.Attempt(ctx, key(r))
			if err == nil && !d.Allowed {
				return fmt.Errorf("gatecount refused: %+v", d)
			}
			return err
		}
	}
	c := newClient(b)
	base := "gatecount-bench:" + randomName("incr") + ":"
	b.Cleanup(func() { c.Del(context.Background(), incrKeys(base)...) })
	return func(r *rand.Rand) error {
		k := base + "0"
		if keys == "random" {
			k = base + strconv.Itoa(r.IntN(1024))
		}
		return c.Incr(ctx, k).Err()
	}
}

// incrKeys returns the keys the INCR floor counts on under base.
func incrKeys(base string) []string {
	names := make([]string, 0, 1024)
	for i := range 1024 {
		names = append(names, base+strconv.Itoa(i))
	}
	return names
}
