// Package storetest is the contract suite for limit stores: the cases every
// [store.Backend], wrapped by [store.New], must pass.
//
// A store's own tests hand Run a function that opens a Pair of handles on a
// fresh store, as two instances of an app would hold them:
//
//	func TestContract(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) storetest.Pair {
//			s := mystore.New(...)
//			t.Cleanup(func() { s.Close() })
//			first, _ := s.Handle("contract:")
//			other, _ := s.Handle("contract-other:")
//			return storetest.Pair{First: first, Second: first, Other: other}
//		})
//	}
//
// Each case uses fresh random keys, so cases never see each other's entries
// and may run against a store other tests use too. The cases never assume a
// fake clock. To test expiry, they write entries that expire a few hundred
// milliseconds after the store's own time. They wait, polling the store,
// until the store's time has passed it. Every wait is bounded.
//
// Each case's doc says which bug of a store author it catches. The cases
// that race calls against each other start their goroutines at one moment,
// on both handles. They yield inside apply, so that a store that does not
// hold its keys through apply lets other calls in. When none of their calls
// finishes for 10 s, the case reports the store deadlocked and returns
// rather than hang. It leaves the stuck goroutines behind. The whole suite
// takes about 7 s on the memory store.
//
// What the suite cannot show is a store's own tests' to add. That is its
// faults (lost connections, timeouts mid-call, restarts), and races the
// suite cannot provoke from one process. It is also behaviour at scale, and
// what only that store has (migrations, secrets, configuration).
//
// A case that finds the contract broken returns a *[ContractViolation]
// saying what broke. A case may not apply to the store: one that needs
// stores of its own when Pair.NewBounded is not set, say. It returns an
// error matching [ErrNotApplicable], and [Run] skips it.
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gatecount/gatecount/store"
)

// Pair is what a case runs against: handles on one store, as the instances
// of an app hold them.
//
// Besides these handles, the cases open handles of their own, on First's
// Store and on the stores NewBounded opens. Their random prefixes begin
// with "stc-". They check that nested prefixes are kept apart, and that one
// bound covers every handle of a store. They stay open until that store is
// closed.
type Pair struct {
	// First and Second have the same prefix: two instances of an app. For a
	// shared store they use separate connections or clients; for a store
	// that is not shared Second may be First (a nil Second is taken to be
	// First).
	First, Second *store.Handle
	// Other is on the same backing as First, under a different prefix.
	Other *store.Handle
	// NewBounded, when set, opens a fresh store of the same kind whose
	// bound is max live entries and returns a handle on it. The case closes
	// that handle's Store. The cases of the bound, of Sweep's count and of
	// Close run on such stores; when NewBounded is nil they do not apply.
	// The close case calls it, and uses the store, under a profiler label
	// of its own. It counts every goroutine started under that label as the
	// store's. One that NewBounded starts (a connection pool's or a
	// client's it opens) must have ended once the store's Close returns.
	NewBounded func(max int) (*store.Handle, error)
	// SharedSweep says that Sweep on a store NewBounded opens also removes
	// entries other stores wrote. It removes every expired row of a table
	// other stores write too, say. How many it removes is then not the
	// suite's to know, and the sweep-exact case does not apply.
	SharedSweep bool
	// SameBacking, when set, opens another Store over First's backing (its
	// connection pool or client, under its secret), as a second store of
	// one app would share it. The backing case closes it; when
	// SameBacking is nil that case does not apply.
	SameBacking func() (*store.Store, error)
	// Key, when set, returns the key a case uses on h for name. Distinct
	// names must give distinct keys. A spread handle's calls name keys of
	// one part ([store.Handle.Spread]), so its tests return, for each
	// name, a key of one part of h. When Key is nil, a case uses each name
	// as its key.
	Key func(h *store.Handle, name string) string
}

// Case is one clause of the contract.
type Case struct {
	// Name names the case; Run uses it as the subtest's name.
	Name string
	// Run checks the clause against p within ctx. It returns nil when the
	// store honours it, a *[ContractViolation] when it does not, and an error
	// matching [ErrNotApplicable] when the clause does not apply to the store.
	Run func(ctx context.Context, p Pair) error
}

// ContractViolation is the error of a case that found the contract broken.
type ContractViolation struct {
	// Case is the name of the case.
	Case string
	// What says what broke.
	What string
}

// Error names the case and says what broke.
func (v *ContractViolation) Error() string {
	return "store contract violated: " + v.Case + ": " + v.What
}

// ErrNotApplicable is matched by the error of a case that does not apply to
// the store under test, such as a round trip between the two instances of a
// store that is not shared.
var ErrNotApplicable = errors.New("storetest: case does not apply to this store")

// CaseTimeout bounds the run of one case in Run.
const CaseTimeout = 2 * time.Minute

// Run runs every case in Cases as a subtest of t, each on a Pair newPair
// opens for it and within [CaseTimeout]. newPair should register t.Cleanup to
// close the stores it opens. A case that does not apply is skipped, giving
// the reason; a violation fails the subtest.
func Run(t *testing.T, newPair func(t *testing.T) Pair) {
	t.Helper()
	for _, c := range Cases {
		t.Run(c.Name, func(t *testing.T) {
			p := newPair(t)
			ctx, cancel := context.WithTimeout(t.Context(), CaseTimeout)
			defer cancel()
			err := c.Run(ctx, p)
			switch {
			case err == nil:
			case errors.Is(err, ErrNotApplicable):
				t.Skip(err.Error())
			default:
				t.Fatal(err)
			}
		})
	}
}

// newCase binds a check to its name.
func newCase(name string, check func(r *runner) error) Case {
	return Case{Name: name, Run: func(ctx context.Context, p Pair) error {
		if p.First == nil || p.Other == nil {
			return &ContractViolation{Case: name, What: "Pair needs First and Other handles"}
		}
		if p.Second == nil {
			p.Second = p.First
		}
		return check(&runner{name: name, ctx: ctx, p: p, id: randomID()})
	}}
}

// runner is one run of a case: its name, context, pair and random key tag.
type runner struct {
	name string
	ctx  context.Context
	p    Pair
	id   string
}

func randomID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// key returns a key of this run on First and Second, unique to it.
func (r *runner) key(label string) string { return r.keyOn(r.p.First, label) }

// keyOn returns a key of this run on h, unique to it: Pair.Key's, if set.
func (r *runner) keyOn(h *store.Handle, label string) string {
	name := "stc-" + r.id + "-" + label
	if r.p.Key == nil {
		return name
	}
	return r.p.Key(h, name)
}

// failf returns the case's violation.
func (r *runner) failf(format string, a ...any) error {
	return &ContractViolation{Case: r.name, What: fmt.Sprintf(format, a...)}
}

// notApplicable returns the marker of a case that does not apply.
func (r *runner) notApplicable(why string) error {
	return fmt.Errorf("%w: %s: %s", ErrNotApplicable, r.name, why)
}

// hname tells which handle of the pair h is, for messages.
func (r *runner) hname(h *store.Handle) string {
	switch {
	case h == r.p.First && h == r.p.Second:
		return "First"
	case h == r.p.First:
		return "First"
	case h == r.p.Second:
		return "Second"
	case h == r.p.Other:
		return "Other"
	}
	return "handle " + h.Prefix()
}
