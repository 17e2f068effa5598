package config

import (
	"log/slog"
	"net/netip"
)

// TrustsEveryone returns the prefixes of ps that trust every address of
// their family (0.0.0.0/0, ::/0): behind them any client chooses its own
// address by sending a forwarding header.
func TrustsEveryone(ps []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range ps {
		if p.Bits() == 0 {
			out = append(out, p)
		}
	}
	return out
}

func warnTrustsEveryone(c Config, log *slog.Logger) {
	all := TrustsEveryone(c.TrustedProxies)
	if len(all) == 0 {
		return
	}
	names := make([]string, len(all))
	for i, p := range all {
		names[i] = p.String()
	}
	log.Warn("TRUSTED_PROXIES trusts every address: any client can choose its own address, and so its own budgets, with a "+c.TrustedProxyHeader.String()+" header. "+
		"List only the networks of your proxies.", "kind", KindTrustsEveryone, "prefixes", names)
}
