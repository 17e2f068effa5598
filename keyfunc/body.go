package keyfunc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
)

// Defaults for [BodyOptions].
const (
	// DefaultMaxBodyBytes bounds how much of a body is read: 64 KiB holds
	// any sign-in or password-reset form with room to spare, while keeping
	// the memory spent on a request that is about to be rejected small.
	DefaultMaxBodyBytes = 64 << 10
	// DefaultMaxValueBytes bounds the length of an extracted field value.
	DefaultMaxValueBytes = 256
)

// BodyOptions configures the Funcs that read a body field.
type BodyOptions struct {
	// MaxBytes is the most bytes read from the body; zero or negative means
	// [DefaultMaxBodyBytes]. The whole body must fit: a field is never taken
	// from a truncated body, because a later duplicate of the field, unseen,
	// could be the one the handler uses. A body of unknown length
	// (ContentLength -1) that is exactly MaxBytes long counts as too large,
	// since telling would take reading one byte more.
	MaxBytes int64

	// MaxValueBytes is the longest field value accepted; zero or negative
	// means [DefaultMaxValueBytes].
	MaxValueBytes int
}

func (o BodyOptions) maxBytes() int64 {
	if o.MaxBytes <= 0 {
		return DefaultMaxBodyBytes
	}
	return o.MaxBytes
}

func (o BodyOptions) maxValue() int {
	if o.MaxValueBytes <= 0 {
		return DefaultMaxValueBytes
	}
	return o.MaxValueBytes
}

// restoredBody is a request body rebuilt from the bytes already read and the
// unread rest of the original; closing it closes the original.
type restoredBody struct {
	io.Reader
	io.Closer
}

// readBody reads the whole body of r, up to max bytes and never more, and
// replaces r.Body so that the handler still reads the original bytes. It
// fails with ErrBodyTooLarge when the body may be longer than max.
func readBody(r *http.Request, max int64) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	if r.ContentLength > max {
		return nil, fmt.Errorf("body of %d bytes over bound of %d: %w", r.ContentLength, max, ErrBodyTooLarge)
	}
	orig := r.Body
	prefix, err := io.ReadAll(io.LimitReader(orig, max))
	if len(prefix) > 0 {
		r.Body = restoredBody{io.MultiReader(bytes.NewReader(prefix), orig), orig}
	}
	if err != nil {
		return nil, fmt.Errorf("reading body: %w: %w", ErrNoKey, err)
	}
	if int64(len(prefix)) == max && r.ContentLength != max {
		return nil, fmt.Errorf("body reaches bound of %d bytes: %w", max, ErrBodyTooLarge)
	}
	return prefix, nil
}

// mediaType returns the lower-cased media type of r's Content-Type.
func mediaType(r *http.Request) (string, error) {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return "", fmt.Errorf("keyfunc: no Content-Type: %w", ErrUnsupportedMediaType)
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return "", fmt.Errorf("keyfunc: Content-Type %q: %w", clip(ct, 64), ErrUnsupportedMediaType)
	}
	return mt, nil
}

const formType = "application/x-www-form-urlencoded"

func isJSONType(mt string) bool {
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

// FormField returns a Func keyed by the field name of an
// application/x-www-form-urlencoded body, as r.PostFormValue would see it.
// Like net/http, it reads the body only for POST, PUT and PATCH. The body is
// restored for the handler, byte for byte, and closing it closes the
// original body. opts bounds what is read; see [BodyOptions].
//
// Errors match [ErrNoKey] and, where one applies, [ErrUnsupportedMediaType]
// (another Content-Type or method), [ErrBodyTooLarge], [ErrMalformedBody]
// (bad escapes, ';' separators, or the field given more than once), or
// [ErrValueTooLong]. A missing or empty field gives plain ErrNoKey.
func FormField(name string, opts BodyOptions) Func {
	return func(r *http.Request) (string, error) {
		mt, err := mediaType(r)
		if err != nil {
			return "", err
		}
		if mt != formType {
			return "", fmt.Errorf("keyfunc: form field %q: Content-Type %s: %w", name, mt, ErrUnsupportedMediaType)
		}
		return formField(r, name, opts)
	}
}

func formField(r *http.Request, name string, opts BodyOptions) (string, error) {
	switch r.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch:
	default:
		return "", fmt.Errorf("keyfunc: form field %q: method %s has no form body: %w", name, clip(r.Method, 16), ErrUnsupportedMediaType)
	}
	body, err := readBody(r, opts.maxBytes())
	if err != nil {
		return "", fmt.Errorf("keyfunc: form field %q: %w", name, err)
	}
	v, err := formValue(body, name)
	if err == nil {
		v, err = checkValue(v, opts)
	}
	if err != nil {
		return "", fmt.Errorf("keyfunc: form field %q: %w", name, err)
	}
	return v, nil
}

// formValue returns the value of the single field name in an urlencoded
// body, with url.ParseQuery's rules for separators and escapes.
func formValue(body []byte, name string) (string, error) {
	var val string
	found := false
	for len(body) > 0 {
		var pair []byte
		pair, body, _ = bytes.Cut(body, []byte("&"))
		if bytes.IndexByte(pair, ';') >= 0 {
			return "", fmt.Errorf("%w: ';' in form body", ErrMalformedBody)
		}
		if len(pair) == 0 {
			continue
		}
		k, v, _ := bytes.Cut(pair, []byte("="))
		key := string(k)
		if bytes.ContainsAny(k, "%+") {
			var err error
			if key, err = url.QueryUnescape(key); err != nil {
				return "", fmt.Errorf("%w: bad escape in form key", ErrMalformedBody)
			}
		}
		if key != name {
			continue
		}
		if found {
			return "", fmt.Errorf("%w: field given more than once", ErrMalformedBody)
		}
		var err error
		if val, err = url.QueryUnescape(string(v)); err != nil {
			return "", fmt.Errorf("%w: bad escape in form value", ErrMalformedBody)
		}
		found = true
	}
	if !found {
		return "", fmt.Errorf("field absent: %w", ErrNoKey)
	}
	return val, nil
}

// JSONField returns a Func keyed by the string field name of the top-level
// JSON object in the body, for Content-Type application/json or any type
// with a +json suffix. Keys are matched as encoding/json matches struct
// fields, case-insensitively, so {"user":"a","USER":"b"} is ambiguous and
// rejected. The whole object must be well-formed and fit in the read bound.
// The body is restored for the handler, byte for byte, and closing it closes
// the original body. opts bounds what is read; see [BodyOptions].
//
// Errors match [ErrNoKey] and, where one applies, [ErrUnsupportedMediaType],
// [ErrBodyTooLarge], [ErrMalformedBody] (bad JSON, not an object, a
// duplicate field, or a value that is not a string), or [ErrValueTooLong]. A
// missing or empty field gives plain ErrNoKey.
func JSONField(name string, opts BodyOptions) Func {
	return func(r *http.Request) (string, error) {
		mt, err := mediaType(r)
		if err != nil {
			return "", err
		}
		if !isJSONType(mt) {
			return "", fmt.Errorf("keyfunc: JSON field %q: Content-Type %s: %w", name, mt, ErrUnsupportedMediaType)
		}
		return jsonField(r, name, opts)
	}
}

func jsonField(r *http.Request, name string, opts BodyOptions) (string, error) {
	body, err := readBody(r, opts.maxBytes())
	if err != nil {
		return "", fmt.Errorf("keyfunc: JSON field %q: %w", name, err)
	}
	v, err := jsonValue(body, name)
	if err == nil {
		v, err = checkValue(v, opts)
	}
	if err != nil {
		return "", fmt.Errorf("keyfunc: JSON field %q: %w", name, err)
	}
	return v, nil
}

// jsonValue returns the string value of the single top-level field matching
// name in the JSON object body.
func jsonValue(body []byte, name string) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	malformed := func(err error) error {
		return fmt.Errorf("%w: %w", ErrMalformedBody, err)
	}
	tok, err := dec.Token()
	if err != nil {
		return "", malformed(err)
	}
	if tok != json.Delim('{') {
		return "", malformed(errors.New("not a JSON object"))
	}
	var val string
	found := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return "", malformed(err)
		}
		key, _ := tok.(string)
		if !strings.EqualFold(key, name) {
			if err := skipValue(dec); err != nil {
				return "", malformed(err)
			}
			continue
		}
		if found {
			return "", malformed(errors.New("field given more than once"))
		}
		tok, err = dec.Token()
		if err != nil {
			return "", malformed(err)
		}
		s, ok := tok.(string)
		if !ok {
			return "", malformed(errors.New("field is not a string"))
		}
		val, found = s, true
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return "", malformed(err)
	}
	if !found {
		return "", fmt.Errorf("field absent: %w", ErrNoKey)
	}
	return val, nil
}

// skipValue consumes one JSON value from dec.
func skipValue(dec *json.Decoder) error {
	depth := 0
	for {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
		if depth == 0 {
			return nil
		}
	}
}

// BodyField returns a Func keyed by the field name of the body, parsed as
// by [JSONField] for JSON media types and as by [FormField] for
// application/x-www-form-urlencoded. Other media types, including
// multipart/form-data, fail with [ErrUnsupportedMediaType].
func BodyField(name string, opts BodyOptions) Func {
	return func(r *http.Request) (string, error) {
		mt, err := mediaType(r)
		if err != nil {
			return "", err
		}
		switch {
		case mt == formType:
			return formField(r, name, opts)
		case isJSONType(mt):
			return jsonField(r, name, opts)
		}
		return "", fmt.Errorf("keyfunc: body field %q: Content-Type %s: %w", name, mt, ErrUnsupportedMediaType)
	}
}

// checkValue rejects empty and overlong field values.
func checkValue(v string, opts BodyOptions) (string, error) {
	if v == "" {
		return "", fmt.Errorf("field empty: %w", ErrNoKey)
	}
	if max := opts.maxValue(); len(v) > max {
		return "", fmt.Errorf("field value of %d bytes over %d: %w", len(v), max, ErrValueTooLong)
	}
	return v, nil
}
