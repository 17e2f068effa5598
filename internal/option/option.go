// Package option holds the one rule the module's option structs share for
// their defaults.
package option

// Default sets *v to def when *v is zero or less: the default of one option.
func Default[T ~int | ~int64](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}
