package redis_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gatecount/gatecount/store"
	redisstore "github.com/gatecount/gatecount/store/redis"

	"github.com/gatecount/gatecount/internal/benchload"
	"github.com/gatecount/gatecount/limiter"
)

// BenchmarkRefused compares a refused attempt answered by the store with
// one the limiter's memory answers (benchload.Refused).
func BenchmarkRefused(b *testing.B) {
	h, _ := benchHandle(b)
	l, err := limiter.New(h, limiter.Options{Name: "bench", Budget: limiter.Budget{Limit: 1, Window: time.Hour}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	benchload.Refused(b, func(ctx context.Context, key string) error {
		_, err := h.Count(ctx, []string{key}, []store.Budget{l.Budget()}, 1)
		return err
	}, func(ctx context.Context, key string) (bool, error) {
		d, err := l.Attempt(ctx, key)
		return d.Allowed, err
	})
}

// BenchmarkFull runs, from 8 callers, Counts of new keys on a store whose
// bound is reached, with its entries under 50 handles: every one is
// refused. It reports the Redis commands each refusal costs (scripts' own
// calls included), which a flood of new keys makes us pay.
func BenchmarkFull(b *testing.B) {
	ctx := context.Background()
	c := newClient(b)
	s := open(b, c, redisstore.Options{Secret: newSecret(), MaxEntries: 1000})
	prefix := randomName("full")
	var hs []*store.Handle
	for i := range 50 {
		hs = append(hs, handle(b, s, prefix+"-"+strconv.Itoa(i)))
	}
	caps := []store.Budget{{Limit: 10, Window: time.Minute}}
	for i := range 1000 {
		if _, err := hs[i%50].Count(ctx, []string{strconv.Itoa(i)}, caps, 1); err != nil {
			b.Fatal(err)
		}
	}
	commands := func() int64 {
		info, err := c.Info(ctx, "stats").Result()
		if err != nil {
			b.Fatal(err)
		}
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "total_commands_processed:"); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
		b.Fatal("no total_commands_processed in INFO")
		return 0
	}
	before := commands()
	b.ResetTimer()
	benchload.Run(b, 8, func(r *rand.Rand) error {
		_, err := hs[r.IntN(50)].Count(ctx, []string{"new-" + strconv.FormatUint(r.Uint64(), 36)}, caps, 1)
		if store.ReasonOf(err) != store.ReasonFull {
			return fmt.Errorf("a new key on a full store: %v, want full", err)
		}
		return nil
	})
	b.StopTimer()
	b.ReportMetric(float64(commands()-before)/float64(b.N), "redis-cmds/op")
}
