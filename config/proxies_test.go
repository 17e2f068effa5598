package config

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/gatecount/gatecount/keyfunc"
	"github.com/gatecount/gatecount/store"
)

func TestTrustedProxyHeader(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  keyfunc.HeaderMode
		ok    bool
	}{
		{"", keyfunc.HeaderXForwardedFor, true},
		{"X-Forwarded-For", keyfunc.HeaderXForwardedFor, true},
		{"forwarded", keyfunc.HeaderForwarded, true},
		{" Forwarded ", keyfunc.HeaderForwarded, true},
		{"X-Real-IP", 0, false},
		{"both", 0, false},
	} {
		c, err := Parse(env("TRUSTED_PROXIES", "10.0.0.0/8", "TRUSTED_PROXY_HEADER", tc.value))
		if !tc.ok {
			var ve *VarError
			if !errors.Is(err, ErrInvalid) || !errors.As(err, &ve) || ve.Var != "TRUSTED_PROXY_HEADER" || !strings.Contains(err.Error(), "X-Forwarded-For or Forwarded") {
				t.Errorf("TRUSTED_PROXY_HEADER=%q: error %v", tc.value, err)
			}
			continue
		}
		if err != nil || c.TrustedProxyHeader != tc.want {
			t.Errorf("TRUSTED_PROXY_HEADER=%q: %v, %v; want %v", tc.value, c.TrustedProxyHeader, err, tc.want)
		}
	}
}

func TestOpenWarnsWhenTrustingEveryone(t *testing.T) {
	for _, tc := range []struct {
		proxies string
		warn    bool
	}{
		{"", false},
		{"10.0.0.0/8, 2001:db8::/32", false},
		{"1.0.0.0/1", false},
		{"0.0.0.0/0", true},
		{"10.0.0.0/8, ::/0", true},
		{"::ffff:0.0.0.0/96", true},
	} {
		var buf strings.Builder
		c, err := Parse(env("TRUSTED_PROXIES", tc.proxies, "RATE_LIMIT_SINGLE_INSTANCE", "true"))
		if err != nil {
			t.Fatal(err)
		}
		o, err := Open(context.Background(), c, store.Options{Logger: slog.New(slog.NewTextHandler(&buf, nil))})
		if err != nil {
			t.Fatal(err)
		}
		o.Close()
		warned := strings.Contains(buf.String(), "kind="+KindTrustsEveryone)
		if warned != tc.warn || strings.Count(buf.String(), KindTrustsEveryone) > 1 {
			t.Errorf("TRUSTED_PROXIES=%q: warned %v, want %v\n%s", tc.proxies, warned, tc.warn, buf.String())
		}
	}
}
