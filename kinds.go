package gatecount

// Log kinds: the stable "kind" attribute of the logs this package writes.
// Every kind of gatecount reads limit-AREA-EVENT (see DESIGN.md); the
// kinds of the limiters it builds are those of packages limiter,
// middleware and store.
const (
	// KindInvalidLimit is logged when a [Limits] is asked for a limiter it
	// cannot build: a budget out of range, a name taken.
	KindInvalidLimit = "limit-config-invalid-limit"
)
