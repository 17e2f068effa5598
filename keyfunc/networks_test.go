package keyfunc

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestCoversEvery(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"10.0.0.0/8, 2001:db8::/32", nil},
		{"0.0.0.0/0", []string{"IPv4"}},
		{"::/0", []string{"IPv6"}},
		{"0.0.0.0/0, ::/0", []string{"IPv4", "IPv6"}},
		{"0.0.0.0/1, 128.0.0.0/1", []string{"IPv4"}},
		{"0.0.0.0/1, 128.0.0.0/2, 192.0.0.0/2", []string{"IPv4"}},
		{"0.0.0.0/1, 128.0.0.0/2, 192.0.0.0/3", nil},
		{"::ffff:0.0.0.0/96", []string{"IPv4"}},
		{"::/1, 8000::/1", []string{"IPv6"}},
		{"::/1, 8000::/2", nil},
		{"255.255.255.255, 0.0.0.0/1", nil},
	}
	for _, tt := range tests {
		ps, err := ParseNetworks(tt.in)
		if err != nil {
			t.Fatalf("ParseNetworks(%q): %v", tt.in, err)
		}
		if got := CoversEvery(ps); !slices.Equal(got, tt.want) {
			t.Errorf("CoversEvery(%s) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestNetworks(t *testing.T) {
	exempt, _ := ParseNetworks("10.0.0.0/8, 2001:db8::/32")
	block := []netip.Prefix{netip.MustParsePrefix("::ffff:192.0.2.0/120")} // mapped, as a program may write it
	n := Networks{Exempt: exempt, Block: block}
	tests := []struct {
		addr            string
		exempt, blocked bool
	}{
		{"10.1.2.3", true, false},
		{"11.0.0.1", false, false},
		{"2001:db8::1", true, false},
		{"2001:db9::1", false, false},
		{"192.0.2.9", false, true},
	}
	for _, tt := range tests {
		a := netip.MustParseAddr(tt.addr)
		if n.Exempted(a) != tt.exempt || n.Blocked(a) != tt.blocked {
			t.Errorf("%s: exempted %v blocked %v, want %v %v", tt.addr, n.Exempted(a), n.Blocked(a), tt.exempt, tt.blocked)
		}
	}
	if (Networks{}).IsZero() != true || n.IsZero() {
		t.Error("IsZero")
	}
	_, err := ParseNetworks("10.0.0.0/8, banana")
	if !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), `network element 2 "banana"`) {
		t.Errorf("ParseNetworks error %v", err)
	}
}

func TestNetworksOf(t *testing.T) {
	tests := []struct {
		key          string
		narrow, wide string // "" for none
	}{
		{"192.0.2.7", "192.0.2.0/24", ""},
		{"203.0.113.255", "203.0.113.0/24", ""},
		{"2001:db8:1:2::/64", "2001:db8:1::/48", "2001:db8::/32"},
		{"2001:db8:ffff:ff00::/56", "2001:db8:ffff::/48", "2001:db8::/32"},
		{"2001:db8:1:2:3:4:5:6/128", "2001:db8:1::/48", "2001:db8::/32"},
		{"2001:db8:1::/48", "", ""},         // the key is already the network
		{"2001:db8::/40", "", ""},           // wider still
		{"64:ff9b:1:2:3:4:5:6/128", "", ""}, // NAT64 local-use: the IPv4 host is hidden
		{"", "", ""},
		{"1:alice", "", ""},
		{"192.0.2.7:80", "", ""},
	}
	for _, tt := range tests {
		narrow, wide := NetworksOf(tt.key)
		if got := prefixText(narrow); got != tt.narrow {
			t.Errorf("NetworksOf(%q) narrow = %q, want %q", tt.key, got, tt.narrow)
		}
		if got := prefixText(wide); got != tt.wide {
			t.Errorf("NetworksOf(%q) wide = %q, want %q", tt.key, got, tt.wide)
		}
	}
}

// TestNetworksOfKeys checks NetworksOf on the keys AddrKey writes: an
// address carrying an IPv4 one counts in that address's /24.
func TestNetworksOfKeys(t *testing.T) {
	var k IPKeyer
	tests := []struct{ addr, narrow, wide string }{
		{"::ffff:198.51.100.9", "198.51.100.0/24", ""},
		{"2002:c633:6409::1", "198.51.100.0/24", ""}, // 6to4 of 198.51.100.9
		{"64:ff9b::198.51.100.9", "198.51.100.0/24", ""},
		{"2001:db8:aa:bb:1:2:3:4", "2001:db8:aa::/48", "2001:db8::/32"},
	}
	for _, tt := range tests {
		narrow, wide := NetworksOf(k.AddrKey(netip.MustParseAddr(tt.addr)))
		if prefixText(narrow) != tt.narrow || prefixText(wide) != tt.wide {
			t.Errorf("NetworksOf(AddrKey(%s)) = %v, %v; want %s, %s", tt.addr, narrow, wide, tt.narrow, tt.wide)
		}
	}
}

func prefixText(p netip.Prefix) string {
	if !p.IsValid() {
		return ""
	}
	return p.String()
}
