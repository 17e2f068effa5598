package middleware

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/gatecount/gatecount/keyfunc"
	"github.com/gatecount/gatecount/limiter"
)

// BudgetState is what the store holds of one budget of one key, read
// without counting.
type BudgetState struct {
	// Budget names the budget as the RateLimit fields do: login-account,
	// login-account-ip, login-ip, send-destination…
	Budget string
	// Key is the key the guard counts it under (see [SignInGuard]).
	Key string
	// Addr is the client address of an address budget; the zero Addr for
	// the account's or the destination's own.
	Addr  netip.Addr
	Limit int
	// Used is what the window has counted, at most Limit.
	Used int
	// Reset is when the window ends, on the store's clock; zero when the
	// key has no window.
	Reset time.Time
	// Refused reports that the budget has no room for one more attempt.
	Refused bool
}

// Standing is what a guard's store holds of an account or a destination,
// and of the addresses asked about, read without counting.
type Standing struct {
	// Key is the account or destination, normalised as the guard counts it.
	Key string
	// Refused reports that one of its own budgets is spent: an attempt
	// naming it from any address is refused (but a sign-in from a known
	// device).
	Refused bool
	// Budgets are its own budgets (an account's: its failures, then its
	// consecutive failures), then those of each address asked about.
	Budgets []BudgetState
}

// RefusedFrom reports whether an attempt naming the account or destination
// from a would be refused now: its own budget, or one of a's, is spent.
func (s Standing) RefusedFrom(a netip.Addr) bool {
	refused := s.Refused
	for _, b := range s.Budgets {
		refused = refused || (b.Refused && b.Addr == a)
	}
	return refused
}

// Unlock lets account sign in again, on every instance within about
// [limiter.AskAgain]. It clears the account's failures from all clients,
// delay and challenged attempts, and sets its consecutive failures to zero,
// kept a year as a success keeps them. For each of addrs,
// it clears the account's failures and lock-outs from it. It touches only
// the account's own keys: an address's attempts budget (NAME-ip) counts
// its attempts on every account, and is left alone. Afterwards the account
// signs in from any address whose own budgets are not spent. A device's
// failures are left alone: they are that device's. The account is
// normalised as the guard normalises it; a name it rejects is an error
// matching [keyfunc.ErrInvalidAccount]. It emits [EventUnlocked].
func (g *SignInGuard) Unlock(ctx context.Context, account string, addrs ...netip.Addr) error {
	return g.clear(ctx, EventUnlocked, account, addrs)
}

// Recovered tells the guard that the owner of account proved it another
// way, such as a completed password reset, from each of addrs. It clears
// what [SignInGuard.Unlock] clears, the cap on consecutive failures
// included, so that the account signs in again from any client. It also
// revokes the account's device tokens issued before it, on every instance:
// such a token counts as no device, for [limiter.MaxWindow]. It emits
// [EventRecovered].
func (g *SignInGuard) Recovered(ctx context.Context, account string, addrs ...netip.Addr) error {
	return g.clear(ctx, EventRecovered, account, addrs)
}

// revokeDevices opens the window of the account's devices key anew (see
// devicesEpoch), so that its start is now. A known device's attempt that
// slips between the reset and the charge opens a short window, which the
// next round replaces. It returns once this process's clock, which issues
// tokens, is past the start's millisecond: a token issued after it is
// never taken for one before.
func (g *SignInGuard) revokeDevices(ctx context.Context, name string) error {
	key := keyfunc.JoinKeys("devices", name)
	for range 4 {
		if err := g.l.Reset(ctx, key); err != nil {
			return err
		}
		d, err := g.l.AttemptEach(ctx, limiter.Charge{Key: key, Budget: recovered})
		switch {
		case err != nil:
			return err
		case d.Unavailable:
			return d.Cause
		}
		if at := recoveredAt(&d, 0); !at.IsZero() {
			if wait := time.Until(at.Add(time.Millisecond)); wait > 0 && wait <= time.Second {
				t := time.NewTimer(wait)
				defer t.Stop()
				select {
				case <-t.C:
				case <-ctx.Done():
				}
			}
			return nil
		}
	}
	return fmt.Errorf("device tokens not revoked: the account's devices key kept its window")
}

// clear clears the keys of account and of addrs (see Unlock), and emits an
// event of kind.
func (g *SignInGuard) clear(ctx context.Context, kind EventKind, account string, addrs []netip.Addr) error {
	name, ips, err := g.accountOf(account, addrs)
	if err != nil {
		return err
	}
	keys := []string{keyfunc.JoinKeys("account", name), keyfunc.JoinKeys("consecutive", name), keyfunc.JoinKeys("delay", name),
		keyfunc.JoinKeys("challenge", name)}
	for _, ip := range ips {
		keys = append(keys, keyfunc.JoinKeys("account-ip", name, ip), keyfunc.JoinKeys("lockouts", name, ip))
	}
	what := "unlock"
	if kind == EventRecovered {
		what = "recovered"
	}
	err = g.l.Reset(ctx, keys...)
	if err == nil {
		// The account is real: its count starts again from zero, and is
		// kept as a success keeps it.
		err = g.l.Keep(ctx, keyfunc.JoinKeys("consecutive", name), limiter.MaxWindow)
	}
	if err == nil && kind == EventRecovered && g.devices != nil {
		err = g.revokeDevices(ctx, name)
	}
	if err != nil {
		return fmt.Errorf("middleware %q: %s: %w", g.o.Name, what, err)
	}
	g.emit(ctx, g.o.OnEvent, Event{Kind: kind, Guard: g.o.Name, Account: name})
	return nil
}

// Show reads, without counting, the account's failures budget and its
// consecutive failures and, for each of addrs, the account's failures from
// it, its attempts budget and its networks'. A store that cannot answer is an error
// matching store.ErrUnavailable.
func (g *SignInGuard) Show(ctx context.Context, account string, addrs ...netip.Addr) (Standing, error) {
	name, ips, err := g.accountOf(account, addrs)
	if err != nil {
		return Standing{}, err
	}
	s := Standing{Key: name}
	err = g.read(ctx, &s, netip.Addr{},
		check{g.o.Name + "-account", limiter.Charge{Key: keyfunc.JoinKeys("account", name), Budget: g.o.AccountFailures}},
		check{g.o.Name + "-consecutive", limiter.Charge{Key: keyfunc.JoinKeys("consecutive", name), Budget: g.rules.consecutive}})
	s.Refused = err == nil && (s.Budgets[0].Refused || s.Budgets[1].Refused)
	addrNames := [addrKeys]string{g.o.Name + "-ip", g.o.Name + "-network", g.o.Name + "-network-wide"}
	for i := 0; i < len(ips) && err == nil; i++ {
		checks := []check{{g.o.Name + "-account-ip", limiter.Charge{Key: keyfunc.JoinKeys("account-ip", name, ips[i]), Budget: g.o.AccountIPFailures}}}
		for j, c := range g.address(nil, ips[i]) {
			checks = append(checks, check{addrNames[j], c})
		}
		err = g.read(ctx, &s, addrs[i], checks...)
	}
	if err != nil {
		return Standing{}, fmt.Errorf("middleware %q: show: %w", g.o.Name, err)
	}
	return s, nil
}

// accountOf returns the account as the guard counts it, and the keys of addrs.
func (g *SignInGuard) accountOf(account string, addrs []netip.Addr) (string, []string, error) {
	name, err := g.o.Normalize(account)
	if err == nil && name == "" {
		err = errors.New("normalised to the empty string")
	}
	if err != nil {
		return "", nil, fmt.Errorf("middleware %q: account: %w: %w", g.o.Name, keyfunc.ErrInvalidAccount, err)
	}
	ips, err := g.addrKeys(addrs)
	return name, ips, err
}

// Unlock lets requests for destination through again, on every instance
// within about [limiter.AskAgain]: it clears the destination's budget, and
// the budget of each of addrs. The destination is normalised as the guard
// normalises it; one it rejects is an error matching
// [keyfunc.ErrInvalidAccount].
func (g *SendGuard) Unlock(ctx context.Context, destination string, addrs ...netip.Addr) error {
	dest, ips, err := g.destinationOf(destination, addrs)
	if err != nil {
		return err
	}
	keys := []string{keyfunc.JoinKeys("destination", dest)}
	for _, ip := range ips {
		keys = append(keys, keyfunc.JoinKeys("ip", ip))
	}
	if err := g.l.Reset(ctx, keys...); err != nil {
		return fmt.Errorf("middleware %q: unlock: %w", g.o.Name, err)
	}
	g.log.Info("destination unlocked", "kind", KindUnlocked, "addresses", len(ips))
	return nil
}

// Show reads, without counting, the destination's budget and the budget of
// each of addrs. A store that cannot answer is an error matching
// store.ErrUnavailable.
func (g *SendGuard) Show(ctx context.Context, destination string, addrs ...netip.Addr) (Standing, error) {
	dest, ips, err := g.destinationOf(destination, addrs)
	if err != nil {
		return Standing{}, err
	}
	s := Standing{Key: dest}
	err = g.read(ctx, &s, netip.Addr{}, check{g.names[0], limiter.Charge{Key: keyfunc.JoinKeys("destination", dest), Budget: g.o.PerDestination}})
	s.Refused = err == nil && s.Budgets[0].Refused
	for i := 0; i < len(ips) && err == nil; i++ {
		err = g.read(ctx, &s, addrs[i], check{g.names[1], limiter.Charge{Key: keyfunc.JoinKeys("ip", ips[i]), Budget: g.o.PerIP}})
	}
	if err != nil {
		return Standing{}, fmt.Errorf("middleware %q: show: %w", g.o.Name, err)
	}
	return s, nil
}

// destinationOf returns the destination as the guard counts it, and the keys of
// addrs.
func (g *SendGuard) destinationOf(destination string, addrs []netip.Addr) (string, []string, error) {
	dest, err := g.o.Normalize(destination)
	if err == nil && dest == "" {
		err = errors.New("normalised to the empty string")
	}
	if err != nil {
		return "", nil, fmt.Errorf("middleware %q: destination: %w: %w", g.o.Name, keyfunc.ErrInvalidAccount, err)
	}
	ips, err := g.addrKeys(addrs)
	return dest, ips, err
}

// addrKeys returns the key of each of addrs, as the guard keys a client.
func (g *guard) addrKeys(addrs []netip.Addr) ([]string, error) {
	ips := make([]string, len(addrs))
	for i, a := range addrs {
		if ips[i] = g.ip.AddrKey(a); ips[i] == "" {
			return nil, fmt.Errorf("middleware: address %d: %w", i, keyfunc.ErrNoKey)
		}
	}
	return ips, nil
}

// A check is one budget Show reads: its name and its charge.
type check struct {
	budget string
	limiter.Charge
}

// read peeks at the checks, all of addr, and appends their states to s.
func (g *guard) read(ctx context.Context, s *Standing, addr netip.Addr, checks ...check) error {
	charges := make([]limiter.Charge, len(checks))
	for i, c := range checks {
		charges[i] = c.Charge
	}
	d, err := g.l.PeekEach(ctx, charges...)
	switch {
	case err != nil:
		return err
	case d.Unavailable:
		return d.Cause
	}
	for i, c := range checks {
		left := d.RemainingOf(i)
		s.Budgets = append(s.Budgets, BudgetState{
			Budget: c.budget, Key: c.Key, Addr: addr, Limit: c.Budget.Limit,
			Used: c.Budget.Limit - left, Reset: d.ResetOf(i), Refused: left == 0,
		})
	}
	return nil
}
