package redis

// Entries returns the live entries under the secret, as last counted
// (store.Sizer).
func (b *Backend) Entries() int { return b.Live() }

// MaxEntries returns the bound on live entries (store.Sizer).
func (b *Backend) MaxEntries() int { return b.max }
