package postgres

// Entries returns the store's estimate of the live entries under its
// secret, or 0 before the first count (store.Sizer).
func (b *Backend) Entries() int { return int(max(b.estimate.Load(), 0)) }

// MaxEntries returns the bound on live entries (store.Sizer).
func (b *Backend) MaxEntries() int { return b.bound.Max() }
