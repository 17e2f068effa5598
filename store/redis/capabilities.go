package redis

import "github.com/gatecount/gatecount/store"

// The store capabilities the backend offers, checked when it compiles.
var (
	_ store.Counter          = (*Backend)(nil)
	_ store.AlgorithmCounter = (*Backend)(nil)
	_ store.Prompt           = (*Backend)(nil)
	_ store.Backing          = (*Backend)(nil)
	_ store.Sizer            = (*Backend)(nil)
	_ store.Secrets          = (*Backend)(nil)
)
