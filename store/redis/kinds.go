package redis

// Log kinds: the stable "kind" attribute of the logs this store writes,
// besides those every store of the module logs (limit-store-sweep-failed
// among them).
const (
	// KindEvicting is logged when Redis's maxmemory-policy may evict live
	// entries.
	KindEvicting = "limit-store-evicting"
	// KindEvictionUnchecked is logged when the maxmemory-policy could not
	// be read.
	KindEvictionUnchecked = "limit-store-eviction-unchecked"
	// KindEvicted is logged when Redis evicted keys since the last sweep.
	KindEvicted = "limit-store-evicted"
	// KindOOM is logged when Redis is at its maxmemory and refuses writes.
	KindOOM = "limit-store-redis-oom"
	// KindNotPersistent is logged when Redis keeps nothing on disk, so a
	// restart forgets every count.
	KindNotPersistent = "limit-store-not-persistent"
	// KindClient is the kind of a line that go-redis itself logged (a
	// pool that failed to dial, say), passed on by a [RedisLogger].
	KindClient = "limit-store-redis-client"
)
