package sqlite_test

import (
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/sqlite"
	"github.com/gatecount/gatecount/store/storetest"
)

// TestContract runs the contract suite with two stores, each with its own
// *sql.DB, on one file, as two processes of an app would hold it;
// SameBacking opens a third over First's *sql.DB.
func TestContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Pair {
		path := tempFile(t)
		// The contract is not about the deadline: under the race detector,
		// with other packages' tests on the same cores, a call that waits
		// for the other store's write could pass the default 2 s and be
		// answered unavailable.
		o := sqlite.Options{Store: store.Options{Deadline: time.Minute}}
		first := open(t, path, o)
		second := open(t, path, o)
		return storetest.Pair{
			First:  handle(t, first, "contract:"),
			Second: handle(t, second, "contract:"),
			Other:  handle(t, first, "contract-other:"),
			NewBounded: func(max int) (*store.Handle, error) {
				path := filepath.Join(t.TempDir(), "bounded.db")
				s, err := sqlite.Open(t.Context(), path, sqlite.Options{Secret: secretA, MaxEntries: max, AutoMigrate: true, Store: o.Store})
				if err != nil {
					return nil, err
				}
				return s.Handle("bounded:")
			},
			// A store over First's *sql.DB, as an app's second store
			// would share it.
			SameBacking: func() (*store.Store, error) {
				db := first.Backend().(store.Backing).Backing().(*sql.DB)
				return sqlite.New(t.Context(), db, sqlite.Options{Secret: secretA, Store: o.Store})
			},
		}
	})
}
