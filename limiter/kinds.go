package limiter

// Log kinds: the stable "kind" attribute of the logs a limiter writes.
// Every kind of gatecount reads limit-AREA-EVENT; a limiter's area is
// "count", how it counts attempts.
const (
	// KindFailOpen is logged when the store is down and the [Allow] policy
	// lets the attempt through uncounted.
	KindFailOpen = "limit-count-fail-open"
	// KindLocal is logged when the store cannot answer and the [Local]
	// policy counts in process memory.
	KindLocal = "limit-count-local-fallback"
	// KindDenied is logged when the store cannot answer and the attempt is
	// refused: under [Deny], when process memory cannot count it either,
	// or when its wait for a busy store finds the queue full.
	KindDenied = "limit-count-store-unavailable"
	// KindStoreFull is logged when a full store makes a limiter count the
	// keys it has no room for in process memory.
	KindStoreFull = "limit-count-store-full"
	// KindMemoryFull is logged when the limiter's memory of a shared
	// store's counts has no room for a new key. It is also logged when a
	// full store's new key is refused because memory has no room either.
	KindMemoryFull = "limit-count-memory-full"
	// KindOutbox is logged when what a limiter owes the store (attempts
	// admitted alone, credits) is dropped. Either their windows ended
	// before the store took them, or the store refused them.
	KindOutbox = "limit-count-outbox-dropped"
	// KindShadowDenied is logged by a limiter in shadow for a would-be
	// refusal: one line per key per window.
	KindShadowDenied = "limit-count-shadow-denied"
)
