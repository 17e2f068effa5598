package redisstore_test

import (
	"context"
	"math/rand/v2"
	"strconv"
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
	caps := []store.Cap{{Max: 1 << 40, Window: time.Minute}}
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
