package redis_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatecount/gatecount/internal/benchload"
	"github.com/gatecount/gatecount/store"
	redisstore "github.com/gatecount/gatecount/store/redis"
)

// The benchmarks run each operation at concurrency 1 and 8, on one hot key
// and on random keys (uniform over 2^20 keys: nearly every call starts a
// new entry, the costly case), and report ops/s and the p50 and p99
// latency of one call. BenchmarkINCR is the floor: one plain INCR round
// trip.
//
//	go test -run '^$' -bench . -benchmem ./store/redis/

var concurrencies = []int{1, 8}

const keySpace = 1 << 20

func BenchmarkINCR(b *testing.B) {
	c := newClient(b)
	base := "gatecount-bench:" + randomName("incr") + ":"
	b.Cleanup(func() {
		keys := make([]string, 0, 1024)
		for i := range 1024 {
			keys = append(keys, base+strconv.Itoa(i))
		}
		c.Del(context.Background(), keys...)
	})
	ctx := context.Background()
	for _, conc := range concurrencies {
		b.Run("c"+strconv.Itoa(conc), func(b *testing.B) {
			benchload.Run(b, conc, func(r *rand.Rand) error {
				return c.Incr(ctx, base+strconv.Itoa(r.IntN(1024))).Err()
			})
		})
	}
}

// benchHandle returns a handle on a fresh store with a secret of its own.
func benchHandle(b *testing.B) (*store.Handle, *redisstore.Backend) {
	s := open(b, newClient(b), redisstore.Options{Secret: newSecret(), MaxEntries: 4 << 20})
	return handle(b, s, randomName("bench")), s.Backend().(*redisstore.Backend)
}

func BenchmarkUpdate(b *testing.B) {
	ctx := context.Background()
	for _, keys := range []string{"hot", "random"} {
		for _, conc := range concurrencies {
			b.Run(keys+"/c"+strconv.Itoa(conc), func(b *testing.B) {
				h, be := benchHandle(b)
				apply := incrFor(time.Minute)
				hot := []string{"hot"}
				benchload.Run(b, conc, func(r *rand.Rand) error {
					k := hot
					if keys == "random" {
						k = []string{strconv.Itoa(r.IntN(keySpace))}
					}
					return h.Update(ctx, k, apply)
				})
				b.ReportMetric(float64(be.Retries())/float64(b.N), "retries/op")
				b.ReportMetric(float64(be.Misses())/float64(b.N), "misses/op")
			})
		}
	}
}

func BenchmarkCount(b *testing.B) {
	ctx := context.Background()
	caps := []store.Budget{{Limit: 1 << 40, Window: time.Minute}}
	for _, keys := range []string{"hot", "random"} {
		for _, conc := range concurrencies {
			b.Run(keys+"/c"+strconv.Itoa(conc), func(b *testing.B) {
				h, _ := benchHandle(b)
				hot := []string{"hot"}
				benchload.Run(b, conc, func(r *rand.Rand) error {
					k := hot
					if keys == "random" {
						k = []string{strconv.Itoa(r.IntN(keySpace))}
					}
					_, err := h.Count(ctx, k, caps, 1)
					return err
				})
			})
		}
	}
}

// BenchmarkRatio runs random-key Update and INCR, both at concurrency 8,
// in alternating phases of ratioOps calls each, one pair of phases an
// iteration, and reports the median over the iterations of the ratio of
// their throughputs (update/incr), with the median of each (ops/s). The
// machine is shared, so that what slows one phase slows the next alike:
// the ratio of two runs a minute apart, as the separate benchmarks give,
// varies with what else ran meanwhile. Run it for a fixed count of pairs:
//
//	go test -run '^$' -bench Ratio -benchtime 20x ./store/redis/
func BenchmarkRatio(b *testing.B) {
	const conc, ratioOps = 8, 4000
	ctx := context.Background()
	c := newClient(b)
	base := "gatecount-bench:" + randomName("ratio") + ":"
	b.Cleanup(func() {
		keys := make([]string, 0, 1024)
		for i := range 1024 {
			keys = append(keys, base+strconv.Itoa(i))
		}
		c.Del(context.Background(), keys...)
	})
	h, _ := benchHandle(b)
	apply := incrFor(time.Minute)
	incr := func(r *rand.Rand) error { return c.Incr(ctx, base+strconv.Itoa(r.IntN(1024))).Err() }
	update := func(r *rand.Rand) error { return h.Update(ctx, []string{strconv.Itoa(r.IntN(keySpace))}, apply) }
	var ratios, incrs, updates []float64
	b.ResetTimer()
	for range b.N {
		i, err := phase(conc, ratioOps, incr)
		if err != nil {
			b.Fatal(err)
		}
		u, err := phase(conc, ratioOps, update)
		if err != nil {
			b.Fatal(err)
		}
		ratios, incrs, updates = append(ratios, u/i), append(incrs, i), append(updates, u)
	}
	b.StopTimer()
	b.ReportMetric(median(ratios), "update/incr")
	b.ReportMetric(median(incrs), "incr-ops/s")
	b.ReportMetric(median(updates), "update-ops/s")
}

// phase calls op n times in all from conc goroutines and returns the calls
// per second.
func phase(conc, n int, op func(r *rand.Rand) error) (float64, error) {
	var next atomic.Int64
	errs := make([]error, conc)
	var wg sync.WaitGroup
	start := time.Now()
	for g := range conc {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), uint64(time.Now().UnixNano())))
			for next.Add(1) <= int64(n) {
				if err := op(r); err != nil {
					errs[g] = err
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	return float64(n) / elapsed.Seconds(), errors.Join(errs...)
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}
