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
