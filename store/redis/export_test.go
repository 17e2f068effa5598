package redis

// KeyName returns the Redis key that holds key under prefix.
func (b *Backend) KeyName(prefix, key string) string {
	ks, err := b.keys(b.space(prefix), prefix, []string{key})
	if err != nil {
		return ""
	}
	return ks.names[0]
}
