package postgres

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/storetest"
)

// TestContract runs the contract suite with two pools as two instances of
// an app: First and Second share a prefix over different pools, Other has
// another prefix on First's pool, and NewBounded opens a store with a secret
// of its own, so that only its own rows count against its bound. Sweep
// removes the expired rows of every secret in the table, which other tests
// write too: SharedSweep. SameBacking opens another store over First's
// pool.
func TestContract(t *testing.T) { runContract(t, newPool(t), newPool(t)) }

// runContract runs the contract suite over two pools, as TestContract
// describes.
func runContract(t *testing.T, poolA, poolB *pgxpool.Pool) {
	storetest.Run(t, func(t *testing.T) storetest.Pair {
		prefix := randomPrefix("contract")
		first, err := newStore(t, poolA, Options{}).Handle(prefix)
		if err != nil {
			t.Fatal(err)
		}
		second, err := newStore(t, poolB, Options{}).Handle(prefix)
		if err != nil {
			t.Fatal(err)
		}
		other, err := first.Store().Handle(randomPrefix("contract-other"))
		if err != nil {
			t.Fatal(err)
		}
		return storetest.Pair{
			First:  first,
			Second: second,
			Other:  other,
			NewBounded: func(max int) (*store.Handle, error) {
				s, err := New(context.Background(), poolA, Options{Secret: randomSecret(), MaxEntries: max})
				if err != nil {
					return nil, err
				}
				h, err := s.Handle(randomPrefix("contract-bounded"))
				if err != nil {
					s.Close()
					return nil, err
				}
				return h, nil
			},
			SharedSweep: true,
			SameBacking: func() (*store.Store, error) {
				return New(context.Background(), poolA, Options{Secret: testSecret})
			},
		}
	})
}
