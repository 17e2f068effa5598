package sqlite

// Log kinds: the stable "kind" attribute of the logs this store writes,
// besides those every store of the module logs (limit-store-sweep-failed
// among them).
const (
	// KindRollbackFailed is logged when a rollback fails. The writer's
	// connection may be unusable.
	KindRollbackFailed = "limit-store-rollback-failed"
)
