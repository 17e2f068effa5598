package config

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/gatecount/gatecount/store"
)

func TestShadow(t *testing.T) {
	for _, tc := range []struct {
		value   string
		on, off []string
		bad     bool
	}{
		{"", nil, []string{"login", "execute"}, false},
		{"false", nil, []string{"login"}, false},
		{"true", []string{"login", "execute", "anything"}, nil, false},
		{" TRUE ", []string{"login"}, nil, false},
		{"login,execute", []string{"login", "execute"}, []string{"health", "reset", "log"}, false},
		{" health , ", []string{"health"}, []string{"execute"}, false},
		{"login;execute", nil, []string{"login"}, true},
		{"login, exec ute", nil, []string{"login"}, true},
	} {
		c, err := Parse(env("RATE_LIMIT_SHADOW", tc.value))
		if tc.bad {
			var ve *VarError
			if !errors.As(err, &ve) || ve.Var != "RATE_LIMIT_SHADOW" || !errors.Is(err, ErrInvalid) {
				t.Errorf("RATE_LIMIT_SHADOW=%q: error %v, want a *VarError naming it", tc.value, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("RATE_LIMIT_SHADOW=%q: %v", tc.value, err)
		}
		for _, n := range tc.on {
			if !c.Shadow.On(n) {
				t.Errorf("RATE_LIMIT_SHADOW=%q: %s not in shadow", tc.value, n)
			}
		}
		for _, n := range tc.off {
			if c.Shadow.On(n) {
				t.Errorf("RATE_LIMIT_SHADOW=%q: %s in shadow", tc.value, n)
			}
		}
	}
}

func TestNetworks(t *testing.T) {
	for _, name := range []string{"RATE_LIMIT_EXEMPT_NETWORKS", "RATE_LIMIT_BLOCK_NETWORKS"} {
		for _, tc := range []struct {
			value string
			want  string // the prefixes, as fmt prints them
			bad   string // in the error, when bad
		}{
			{"", "[]", ""},
			{"10.0.0.0/8, 192.0.2.7 ,2001:db8::/32", "[10.0.0.0/8 192.0.2.7/32 2001:db8::/32]", ""},
			{"10.0.0.0/8,banana", "", `network element 2 "banana"`},
			{"10.0.0.0/40", "", `network element 1`},
		} {
			c, err := Parse(env(name, tc.value))
			if tc.bad != "" {
				var ve *VarError
				if !errors.As(err, &ve) || ve.Var != name || !strings.Contains(err.Error(), tc.bad) {
					t.Errorf("%s=%q: error %v, want one naming the variable and %s", name, tc.value, err, tc.bad)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%s=%q: %v", name, tc.value, err)
			}
			got := c.ExemptNetworks
			if name == "RATE_LIMIT_BLOCK_NETWORKS" {
				got = c.BlockNetworks
			}
			if fmt.Sprint(got) != tc.want {
				t.Errorf("%s=%q: %v, want %s", name, tc.value, got, tc.want)
			}
		}
	}
	c, _ := Parse(env("RATE_LIMIT_EXEMPT_NETWORKS", "10.0.0.0/8", "RATE_LIMIT_BLOCK_NETWORKS", "192.0.2.0/24"))
	if n := c.Networks(); fmt.Sprint(n.Exempt, n.Block) != "[10.0.0.0/8] [192.0.2.0/24]" {
		t.Errorf("Networks() = %+v", n)
	}
}

// Open warns when an exempt or blocked list holds every address of a
// family, once each.
func TestOpenWarnsWhenNetworksHoldEveryone(t *testing.T) {
	for _, tc := range []struct {
		exempt, block string
		kinds         []string
	}{
		{"10.0.0.0/8", "192.0.2.0/24", nil},
		{"0.0.0.0/0", "", []string{KindExemptEveryone}},
		{"", "::/0", []string{KindBlockEveryone}},
		{"0.0.0.0/1,128.0.0.0/1", "0.0.0.0/0,::/0", []string{KindExemptEveryone, KindBlockEveryone}},
	} {
		var buf strings.Builder
		c, err := Parse(env("RATE_LIMIT_EXEMPT_NETWORKS", tc.exempt, "RATE_LIMIT_BLOCK_NETWORKS", tc.block, "RATE_LIMIT_SINGLE_INSTANCE", "true"))
		if err != nil {
			t.Fatal(err)
		}
		o, err := Open(context.Background(), c, store.Options{Logger: slog.New(slog.NewTextHandler(&buf, nil))})
		if err != nil {
			t.Fatal(err)
		}
		o.Close()
		for _, k := range []string{KindExemptEveryone, KindBlockEveryone} {
			want := 0
			for _, w := range tc.kinds {
				if w == k {
					want = 1
				}
			}
			if n := strings.Count(buf.String(), "kind="+k); n != want {
				t.Errorf("exempt %q block %q: %d warnings of kind %s, want %d\n%s", tc.exempt, tc.block, n, k, want, buf.String())
			}
		}
	}
}
