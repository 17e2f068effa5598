package limiter

import (
	"context"

	"github.com/gatecount/gatecount/internal/overload"
)

// Vouch returns a copy of ctx for attempts of a client that proved who it
// is, such as one with a signed device token. Their store calls wait in a
// queue of their own, which strangers' calls never join: a flood delays
// them by one turn, not by its length. They may count new keys alone in
// room of process memory kept for them, which strangers' new keys never
// fill. Whoever can be vouched for shares that queue and room, so vouch
// only for proof an attacker cannot mint. The room is an eighth of memory,
// and at least 16 keys.
func Vouch(ctx context.Context) context.Context {
	return overload.Vouched(ctx)
}

// vouched reports whether ctx comes from Vouch.
func vouched(ctx context.Context) bool { return overload.IsVouched(ctx) }
