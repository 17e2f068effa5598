package memory

import "github.com/gatecount/gatecount/store"

// The store capabilities the backend offers, checked when it compiles.
var (
	_ store.Inline           = (*Backend)(nil)
	_ store.Counter          = (*Backend)(nil)
	_ store.AlgorithmCounter = (*Backend)(nil)
	_ store.Sizer            = (*Backend)(nil)
)
