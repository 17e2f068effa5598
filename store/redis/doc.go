// Package redis is a limit store in Redis, shared by every instance of an
// app that uses the same Redis. It works over any go-redis v9
// UniversalClient: a single node, Sentinel or Cluster. Counts are exact
// across instances, on the Redis server's clock. The examples import
// go-redis as goredis:
//
//	import goredis "github.com/redis/go-redis/v9"
//
//	client := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true, MaxRetries: -1})
//	s, err := redis.New(ctx, client, redis.Options{Secret: secret})
//	...
//	signIn, err := s.Handle("signin:")
//
// [OpenURL] opens a store with a client of its own, from a URL:
//
//	RATE_LIMIT_STORE_URL=redis://[user:password@]host:6379/0   plain TCP
//	RATE_LIMIT_STORE_URL=rediss://[user:password@]host:6380/0  TLS
//	RATE_LIMIT_STORE_URL=redis://host:7000?addr=host2:7001      a Cluster, from more nodes
//
// A URL naming a Cluster node opens a cluster client. Sentinel, and any
// client configured by hand, go through New.
//
// # Keys
//
// No key is kept in clear: an entry lives under an HMAC-SHA-256 of its
// prefix and key under the secret. After the secret changes, old entries
// are neither read nor counted; Redis expires them. All keys of one handle
// share a Cluster hash tag, so one limiter's traffic goes to one master,
// unless the handle is spread (store.Handle.Spread, as a limiter of one key
// per request has): on a Cluster its keys then lie in 256 shards over
// every master, and a call names keys of one shard.
//
// # Redis settings
//
// Redis must not evict: set maxmemory-policy noeviction, or no maxmemory.
// New refuses a server that may evict ([ErrEvicting]), unless
// Options.AllowEviction. A full Redis answers writes as a full store
// (store.ErrFull), keys it holds included: size maxmemory for the bound (the
// docs/stores.md gives the memory an entry takes). Redis 6.2 or later is needed,
// with Lua scripting. The logs of kinds [KindEvicting], [KindEvicted],
// [KindEvictionUnchecked], [KindOOM] and [KindNotPersistent] say when a server's
// settings put counts at risk.
//
// # Cluster
//
// Run a Cluster with cluster-require-full-coverage no: otherwise a master
// that fails stops every slot, and every limiter with it. A Cluster with a
// master down still opens, and its limiters, and a spread limiter's keys,
// on the other masters count.
//
// # Faults
//
// The guard of package store bounds every call by its deadline and opens
// its breaker when Redis keeps failing; the store recovers by itself. Give
// a client of your own ContextTimeoutEnabled, so that a call abandoned at
// its deadline frees its connection. Give it MaxRetries -1, as a retried
// command may count an attempt twice. OpenURL's client has both. DESIGN.md
// says how the store works.
package redis
