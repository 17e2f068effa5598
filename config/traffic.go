package config

import (
	"log/slog"
	"net/netip"
	"strconv"
	"strings"

	"github.com/gatecount/gatecount/keyfunc"
)

// Shadow is which limiters run in shadow (RATE_LIMIT_SHADOW): they count,
// and report would-be refusals, but refuse nothing.
type Shadow struct {
	All   bool     // every limiter: RATE_LIMIT_SHADOW=true
	Names []string // the limiters of these names
}

// On reports whether the limiter named name runs in shadow.
func (s Shadow) On(name string) bool {
	if s.All {
		return true
	}
	for _, n := range s.Names {
		if n == name {
			return true
		}
	}
	return false
}

// Networks returns the networks of RATE_LIMIT_EXEMPT_NETWORKS and
// RATE_LIMIT_BLOCK_NETWORKS, for the limiters' Networks options.
func (c Config) Networks() keyfunc.Networks {
	return keyfunc.Networks{Exempt: c.ExemptNetworks, Block: c.BlockNetworks}
}

// readTraffic reads RATE_LIMIT_SHADOW, RATE_LIMIT_EXEMPT_NETWORKS and
// RATE_LIMIT_BLOCK_NETWORKS into c.
func (r *reader) readTraffic(c *Config) {
	c.Shadow = r.shadow("RATE_LIMIT_SHADOW")
	c.ExemptNetworks = r.networks("RATE_LIMIT_EXEMPT_NETWORKS")
	c.BlockNetworks = r.networks("RATE_LIMIT_BLOCK_NETWORKS")
}

// shadow reads true, false, or a comma-separated list of limiter names.
func (r *reader) shadow(name string) Shadow {
	v := r.str(name)
	if v == "" {
		return Shadow{}
	}
	if b, err := strconv.ParseBool(v); err == nil {
		return Shadow{All: b}
	}
	var s Shadow
	for n := range strings.SplitSeq(v, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		if len(n) > 64 || strings.Trim(n, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") != "" {
			r.fail(name, v, "true, false, or a comma-separated list of limiter names (letters, digits, '-', '_' and '.') such as login,execute")
			return Shadow{}
		}
		s.Names = append(s.Names, n)
	}
	return s
}

// networks reads a comma-separated list of CIDRs.
func (r *reader) networks(name string) []netip.Prefix {
	v := r.str(name)
	if v == "" {
		return nil
	}
	ps, err := keyfunc.ParseNetworks(v)
	if err != nil {
		r.fail(name, v, "a comma-separated list of CIDRs such as 10.0.0.0/8,2001:db8::/32 ("+err.Error()+")")
	}
	return ps
}

// warnEveryone logs a warning for RATE_LIMIT_EXEMPT_NETWORKS or
// RATE_LIMIT_BLOCK_NETWORKS when it holds every address of a family.
func warnEveryone(c Config, log *slog.Logger) {
	if fams := keyfunc.CoversEvery(c.ExemptNetworks); len(fams) > 0 {
		log.Warn("RATE_LIMIT_EXEMPT_NETWORKS holds every address: no request is charged to a per-address budget. "+
			"List only the networks to exempt.", "kind", KindExemptEveryone, "families", fams)
	}
	if fams := keyfunc.CoversEvery(c.BlockNetworks); len(fams) > 0 {
		log.Warn("RATE_LIMIT_BLOCK_NETWORKS holds every address: every request from these families is answered 403. "+
			"List only the networks to block.", "kind", KindBlockEveryone, "families", fams)
	}
}
