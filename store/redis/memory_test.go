package redis_test

import (
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatecount/gatecount/store"
	redisstore "github.com/gatecount/gatecount/store/redis"
	"github.com/gatecount/gatecount/store/storekit"
)

// TestMemoryPerEntry measures what a live entry costs in Redis memory, on a
// server of its own: the growth of used_memory over many fresh counters of
// one limiter, split into the entries themselves and their live index. The
// index must cost less per entry than the entry it indexes.
func TestMemoryPerEntry(t *testing.T) {
	const n = 20_000
	addr := startServer(t, 7100)
	c := ownClient(t, addr)
	ctx := t.Context()
	used := func() int64 {
		t.Helper()
		s, err := c.Info(ctx, "memory").Result()
		if err != nil {
			t.Fatal(err)
		}
		v, err := strconv.ParseInt(infoField(s, "used_memory"), 10, 64)
		if err != nil {
			t.Fatalf("used_memory in %q: %v", s, err)
		}
		return v
	}
	s := open(t, c, redisstore.Options{Secret: newSecret()})
	h := handle(t, s, "signin:")
	caps := []store.Budget{{Limit: 5, Window: time.Hour}}
	// One counter first, so that the live index and the list of tags exist.
	if _, err := h.Count(ctx, []string{"first"}, caps, 1); err != nil {
		t.Fatal(err)
	}
	before := used()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				if _, err := h.Count(ctx, []string{"198.51.100." + strconv.Itoa(i)}, caps, 1); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	total := float64(used()-before) / n
	var entry, index float64
	var keys []string
	it := c.Scan(ctx, 0, "gatecount:*", 1000).Iterator()
	for it.Next(ctx) {
		keys = append(keys, it.Val())
	}
	for _, k := range keys {
		u, err := c.MemoryUsage(ctx, k, 0).Result()
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case isIndex(k):
			index += float64(u)
		case strings.HasSuffix(k, ":tags"):
		default:
			entry += float64(u)
		}
	}
	live := float64(len(keys) - 3) // the index's two keys and the list of tags
	entry /= live
	index /= live
	t.Logf("%d live entries: used_memory grew %.0f bytes per entry; MEMORY USAGE: entry %.0f, its share of the live index %.0f; %d entries (the default bound) need about %.0f MB",
		int(live), total, entry, index, storekit.DefaultMaxEntriesDatabase, total*float64(storekit.DefaultMaxEntriesDatabase)/1e6)
	if index > entry {
		t.Errorf("the live index costs %.0f bytes per entry, more than the entry's own %.0f", index, entry)
	}
}

// infoField returns the value of a field of an INFO answer.
func infoField(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}
