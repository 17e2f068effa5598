package memory_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/memory"
	"github.com/gatecount/gatecount/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newPair opens a memory store for one contract case: First and Second are
// one handle, since the store is not shared; Other is another prefix on it.
func newPair(t *testing.T) storetest.Pair {
	s := memory.New(memory.Options{})
	t.Cleanup(func() { s.Close() })
	first, err := s.Handle("contract:")
	if err != nil {
		t.Fatal(err)
	}
	other, err := s.Handle("contract-other:")
	if err != nil {
		t.Fatal(err)
	}
	return storetest.Pair{
		First:  first,
		Second: first,
		Other:  other,
		NewBounded: func(max int) (*store.Handle, error) {
			return memory.New(memory.Options{MaxEntries: max}).Handle("bounded:")
		},
	}
}

func TestContract(t *testing.T) { storetest.Run(t, newPair) }
