package redis_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gatecount/gatecount/internal/benchload"
	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/store"
	redisstore "github.com/gatecount/gatecount/store/redis"
)

// BenchmarkClusterSpread runs one-key limiter Attempts on random keys
// (uniform over 2^20) on the test Cluster from 64 callers, the limiter's
// keys together (one master) and spread (every master). Besides ops/s it
// reports the masters' script calls a second, summed (scripts/s) and of
// the busiest (busiest-scripts/s), and the CPU the masters used, in cores
// (redis-cores):
//
//	go test -run '^$' -bench ClusterSpread -benchtime 20000x -count 6 ./store/redis/
func BenchmarkClusterSpread(b *testing.B) {
	for _, spread := range []bool{false, true} {
		name := "together"
		if spread {
			name = "spread"
		}
		b.Run(name, func(b *testing.B) {
			c := newCluster(b)
			s := open(b, c, redisstore.Options{Secret: newSecret(), Store: store.Options{MaxInFlight: 256}})
			h := handle(b, s, randomName("bench"))
			if spread {
				h.Spread()
			}
			l, err := limiter.New(h, limiter.Options{Name: "bench", Budget: limiter.Budget{Limit: limiter.MaxLimit, Window: time.Minute}})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { l.Close() })
			ctx := context.Background()
			calls0, cpu0, start := scriptCalls(b, c), masterCPU(b, c), time.Now()
			benchload.Run(b, 64, func(r *rand.Rand) error {
				d, err := l.Attempt(ctx, strconv.Itoa(r.IntN(1<<20)))
				if err == nil && !d.Allowed {
					return fmt.Errorf("refused: %+v", d)
				}
				return err
			})
			secs := time.Since(start).Seconds()
			calls, cpu := scriptCalls(b, c), masterCPU(b, c)
			var sum, busiest, cores float64
			for addr, n := range calls {
				rate := float64(n-calls0[addr]) / secs
				sum += rate
				busiest = max(busiest, rate)
				cores += (cpu[addr] - cpu0[addr]) / secs
			}
			b.ReportMetric(sum, "scripts/s")
			b.ReportMetric(busiest, "busiest-scripts/s")
			b.ReportMetric(cores, "redis-cores")
		})
	}
}

// masterCPU returns the CPU seconds each master of c has used (INFO cpu,
// user and system), by its address.
func masterCPU(tb testing.TB, c *redis.ClusterClient) map[string]float64 {
	tb.Helper()
	var mu sync.Mutex
	out := map[string]float64{}
	err := c.ForEachMaster(context.Background(), func(ctx context.Context, m *redis.Client) error {
		info, err := m.Info(ctx, "cpu").Result()
		if err != nil {
			return err
		}
		var secs float64
		for line := range strings.SplitSeq(info, "\n") {
			name, v, _ := strings.Cut(strings.TrimSpace(line), ":")
			if name == "used_cpu_sys" || name == "used_cpu_user" {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return err
				}
				secs += f
			}
		}
		mu.Lock()
		out[m.Options().Addr] = secs
		mu.Unlock()
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return out
}
