package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	goredis "github.com/redis/go-redis/v9"

	"github.com/gatecount/gatecount/store"
)

// ErrEvicting is matched by the error New and [OpenURL] return for a Redis
// that may evict live entries: one with a maxmemory limit and a
// maxmemory-policy other than noeviction. Every entry has a TTL, so even
// the volatile-* policies evict them, and an evicted count frees the budget
// of whoever it counted. The error names the server, its settings and the
// fix; Options.AllowEviction accepts such a server instead.
var ErrEvicting = errors.New("redis: Redis may evict live counts")

// serverFacts is what the store reads of one Redis server's settings.
type serverFacts struct {
	addr      string
	known     bool   // maxmemory and policy were read
	maxmemory int64  // bytes; 0: no limit
	policy    string // maxmemory-policy
	evicted   int64  // evicted_keys since the server started; -1: unknown
	persist   string // "aof", "rdb", "none" or "" (unknown)
	err       error  // why the settings could not be read
}

// evicting reports whether the server may evict keys.
func (f serverFacts) evicting() bool {
	return f.known && f.maxmemory > 0 && f.policy != "noeviction"
}

// readFacts reads a server's settings from INFO, and from CONFIG GET what
// INFO does not tell or where INFO is not allowed; its persistence too when
// persist is set. An error is that of a server that does not answer;
// settings that could not be read leave known false and err set.
func readFacts(ctx context.Context, c *goredis.Client, persist bool) (serverFacts, error) {
	f := serverFacts{addr: c.Options().Addr, evicted: -1}
	info, err := c.Info(ctx).Result()
	switch {
	case err == nil:
		mm, err1 := strconv.ParseInt(infoField(info, "maxmemory"), 10, 64)
		f.policy = infoField(info, "maxmemory_policy")
		f.known = err1 == nil && f.policy != ""
		f.maxmemory = mm
		if n, err := strconv.ParseInt(infoField(info, "evicted_keys"), 10, 64); err == nil {
			f.evicted = n
		}
		if infoField(info, "aof_enabled") == "1" {
			f.persist = "aof"
		}
	case !isRedisError(err):
		return f, err
	default:
		f.err = err
	}
	if !f.known {
		m, err := c.ConfigGet(ctx, "maxmemory*").Result()
		switch {
		case err == nil:
			mm, err1 := strconv.ParseInt(m["maxmemory"], 10, 64)
			f.policy = m["maxmemory-policy"]
			f.known = err1 == nil && f.policy != ""
			f.maxmemory = mm
		case !isRedisError(err):
			return f, err
		default:
			f.err = errors.Join(f.err, err)
		}
	}
	if persist && f.persist == "" {
		m, err := c.ConfigGet(ctx, "save").Result()
		switch {
		case err == nil && m["save"] != "":
			f.persist = "rdb"
		case err == nil:
			f.persist = "none"
		case !isRedisError(err):
			return f, err
		}
	}
	return f, nil
}

// servers reads the facts of every server the client writes to (their
// persistence too when persist is set): each master of a Cluster, or the
// one server. down lists the masters of a Cluster that
// did not answer; err is set when no server answered.
func (b *Backend) servers(ctx context.Context, persist bool) (out []serverFacts, down []string, err error) {
	var mu sync.Mutex
	each := func(ctx context.Context, c *goredis.Client) error {
		f, err := readFacts(ctx, c, persist)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			down = append(down, c.Options().Addr)
			return err
		}
		out = append(out, f)
		return nil
	}
	switch c := b.c.(type) {
	case *goredis.ClusterClient:
		err = c.ForEachMaster(ctx, each)
		if len(out) > 0 {
			err = nil // the others are read when they answer
		}
	case *goredis.Client:
		err = each(ctx, c)
	default:
		return nil, nil, nil // a client of another kind: nothing to read
	}
	slices.SortFunc(out, func(a, b serverFacts) int { return strings.Compare(a.addr, b.addr) })
	slices.Sort(down)
	return out, down, err
}

// checkServers checks at start that no server may evict live entries,
// unless evicting is allowed. It logs what a deployment should know: a
// server that may evict (when allowed), one whose settings could not be
// read, and one that keeps no data across a restart.
func (b *Backend) checkServers(ctx context.Context) error {
	fs, down, err := b.servers(ctx, true)
	if err != nil {
		return fmt.Errorf("redis: redis does not answer: %w", &store.UnavailableError{Reason: store.ReasonDown, Err: err})
	}
	if down != nil {
		b.log.Warn("Redis Cluster masters did not answer at start: their limiters are answered unavailable, and their settings are checked once they answer",
			"kind", KindEvictionUnchecked, "addr", strings.Join(down, ","))
	}
	b.factsMu.Lock()
	defer b.factsMu.Unlock()
	var unchecked, forgetful []string
	var errs []error
	for _, f := range fs {
		b.facts[f.addr] = f
		switch {
		case f.evicting() && !b.allowEviction:
			return fmt.Errorf("%w: %s has maxmemory %d and maxmemory-policy %s, so it evicts keys when full, and an evicted count frees the budget of whoever it counted: "+
				"set maxmemory-policy noeviction (CONFIG SET maxmemory-policy noeviction, and in its configuration), or accept the risk with Options.AllowEviction",
				ErrEvicting, f.addr, f.maxmemory, f.policy)
		case f.evicting():
			b.log.Error("Redis may evict live counts, which frees the budget of whoever they count; accepted by AllowEviction: set maxmemory-policy noeviction",
				"kind", KindEvicting, "addr", f.addr, "maxmemory", f.maxmemory, "maxmemory_policy", f.policy)
		case !f.known:
			unchecked = append(unchecked, f.addr)
			errs = append(errs, f.err)
		}
		if f.persist == "none" {
			forgetful = append(forgetful, f.addr)
		}
	}
	if unchecked != nil {
		b.log.Warn("could not read Redis maxmemory and maxmemory-policy (INFO and CONFIG GET refused): make sure the server cannot evict keys (maxmemory-policy noeviction), or live counts may be evicted",
			"kind", KindEvictionUnchecked, "addr", strings.Join(unchecked, ","), "err", errors.Join(errs...))
	}
	if forgetful != nil {
		b.log.Warn("Redis keeps no data on disk (no appendonly, no save): a restart of the server forgets every count, which frees every budget; set appendonly yes, or save snapshots",
			"kind", KindNotPersistent, "addr", strings.Join(forgetful, ","))
	}
	return nil
}

// recheckServers runs with each background sweep. It logs an error when a
// server's settings changed so that it may now evict live entries. It logs
// one when a server evicted keys since the last check.
func (b *Backend) recheckServers(ctx context.Context) {
	fs, _, err := b.servers(ctx, false)
	if err != nil {
		return // the sweep reports a server that does not answer
	}
	b.factsMu.Lock()
	defer b.factsMu.Unlock()
	for _, f := range fs {
		was, seen := b.facts[f.addr]
		if !f.known && seen && was.known {
			f.known, f.maxmemory, f.policy = true, was.maxmemory, was.policy // settings no longer readable: keep what was read
		}
		b.facts[f.addr] = f
		if f.evicting() && (!seen || !was.evicting()) {
			b.log.Error("Redis settings changed: it may now evict live counts, which frees the budget of whoever they count: set maxmemory-policy noeviction",
				"kind", KindEvicting, "addr", f.addr, "maxmemory", f.maxmemory, "maxmemory_policy", f.policy)
		}
		if seen && was.evicted >= 0 && f.evicted > was.evicted {
			b.log.Error("Redis evicted keys since the last check: counts among them were lost, freeing budgets; set maxmemory-policy noeviction",
				"kind", KindEvicted, "addr", f.addr, "evicted_keys", f.evicted-was.evicted, "maxmemory_policy", f.policy)
		}
	}
}

// storeErr turns a Redis error answer into the store's. An OOM answer (a
// Redis at its maxmemory, refusing writes) is the store being full. The
// limiters answer it as they answer a full bound, not as a store that is
// down.
func (b *Backend) storeErr(err error) error {
	if err == nil || !goredis.IsOOMError(err) {
		return err
	}
	b.oomLog.Do(func() {
		b.log.Error("Redis is at its maxmemory and refuses writes: new counts are answered full until memory is freed; raise maxmemory, or lower RATE_LIMIT_MAX_ENTRIES below what it holds",
			"kind", KindOOM, "err", err)
	})
	return fmt.Errorf("redis: %v: %w", err, store.ErrFull)
}
