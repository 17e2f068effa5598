package middleware

import (
	"fmt"
	"net/http"

	"github.com/gatecount/gatecount/keyfunc"
)

// bodyFields returns a reader of the body field name, and of the field
// secret when it is not "", in one reading (keyfunc.BodyFields). An absent
// or empty name is no key, and one over opts.MaxValueBytes is too long. The
// secret, such as a password, is bounded only by opts.MaxBytes; absent or
// empty, it is "". Errors never hold its value. The body is restored for
// the handler.
func bodyFields(name, secret string, opts keyfunc.BodyOptions) func(r *http.Request) (value, secretValue string, err error) {
	maxValue := opts.MaxValueBytes
	if maxValue <= 0 {
		maxValue = keyfunc.DefaultMaxValueBytes
	}
	names, wide := []string{name}, opts
	if secret != "" {
		names = append(names, secret)
		wide.MaxValueBytes = int(opts.MaxBytes)
		if opts.MaxBytes <= 0 {
			wide.MaxValueBytes = keyfunc.DefaultMaxBodyBytes
		}
	}
	return func(r *http.Request) (string, string, error) {
		vs, err := keyfunc.BodyFields(r, wide, names...)
		switch {
		case err != nil:
		case vs[0] == "":
			err = fmt.Errorf("field empty or absent: %w", keyfunc.ErrNoKey)
		case len(vs[0]) > maxValue:
			err = fmt.Errorf("field value of %d bytes over %d: %w", len(vs[0]), maxValue, keyfunc.ErrValueTooLong)
		}
		if err != nil {
			return "", "", fmt.Errorf("middleware: body field %q: %w", name, err)
		}
		if secret == "" {
			return vs[0], "", nil
		}
		return vs[0], vs[1], nil
	}
}

// bodyField returns a Func keyed by the body field name, as bodyFields
// reads it.
func bodyField(name string, opts keyfunc.BodyOptions) keyfunc.Func {
	read := bodyFields(name, "", opts)
	return func(r *http.Request) (string, error) {
		v, _, err := read(r)
		return v, err
	}
}
