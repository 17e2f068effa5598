package config

// Log kinds: the stable "kind" attribute of the logs [Open] writes. Every
// kind of gatecount reads limit-AREA-EVENT. Here the area is "store" (the
// store opened) or "config" (a setting that holds every address).
const (
	// KindStoreOpened is logged when Open has opened the store: its kind,
	// whether it is shared, and its instance ID.
	KindStoreOpened = "limit-store-opened"
	// KindMemoryNotShared is logged when Open opens the memory store for
	// an app that has not said it runs one instance.
	KindMemoryNotShared = "limit-store-not-shared"
	// KindTrustsEveryone is logged when TRUSTED_PROXIES trusts every IPv4
	// or every IPv6 address.
	KindTrustsEveryone = "limit-config-trusted-proxies-everyone"
	// KindExemptEveryone is logged when RATE_LIMIT_EXEMPT_NETWORKS holds
	// every IPv4 or every IPv6 address.
	KindExemptEveryone = "limit-config-exempt-networks-everyone"
	// KindBlockEveryone is logged when RATE_LIMIT_BLOCK_NETWORKS holds
	// every IPv4 or every IPv6 address.
	KindBlockEveryone = "limit-config-block-networks-everyone"
)
