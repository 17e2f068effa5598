package limiter

import "context"

type vouchKey struct{}

// Vouch returns a copy of ctx under which attempts may count new keys alone
// in room of process memory kept for them. A flood of strangers' new keys
// fills the rest of memory, never that room. Vouch only for a client that
// proved who it is, such as one with a signed device token: whoever can be
// vouched for can fill that room too. The room is an eighth of memory, and
// at least 16 keys.
func Vouch(ctx context.Context) context.Context {
	return context.WithValue(ctx, vouchKey{}, true)
}

// vouched reports whether ctx comes from Vouch.
func vouched(ctx context.Context) bool {
	v, _ := ctx.Value(vouchKey{}).(bool)
	return v
}
