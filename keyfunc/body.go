package keyfunc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"
)

// Defaults for [BodyOptions].
const (
	// DefaultMaxBodyBytes bounds how much of a body is read. 64 KiB holds
	// any sign-in or password-reset form with room to spare, and keeps
	// small the memory spent on a request that is about to be rejected.
	DefaultMaxBodyBytes = 64 << 10
	// DefaultMaxValueBytes bounds the length of an extracted field value,
	// as sent: the one bound on an account value, [MaxAccountInput], which
	// the Normalize functions apply too.
	DefaultMaxValueBytes = MaxAccountInput
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

// mediaType returns the lower-cased media type of r's Content-Type and its
// parameters. A malformed Content-Type, parameters included, is refused:
// a handler that reads the type and ignores the error, as
// mime.ParseMediaType allows, would otherwise parse a body the guard could
// not.
func mediaType(r *http.Request) (string, map[string]string, error) {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return "", nil, fmt.Errorf("keyfunc: no Content-Type: %w", ErrUnsupportedMediaType)
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil {
		return "", nil, fmt.Errorf("keyfunc: Content-Type %q: %w", clip(ct, 64), ErrUnsupportedMediaType)
	}
	return mt, params, nil
}

const (
	formType      = "application/x-www-form-urlencoded"
	multipartType = "multipart/form-data"
)

func isJSONType(mt string) bool {
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

// The body forms a Func may accept.
type bodyForms uint8

const (
	formBody bodyForms = 1 << iota
	multipartBody
	jsonBody
	anyBody = formBody | multipartBody | jsonBody
)

// FormField returns a Func keyed by the field name of an
// application/x-www-form-urlencoded body, with url.ParseQuery's separators
// and escapes. The name is matched in any letter case. A handler matching
// it in another case than r.PostFormValue does can then never see a field
// the Func did not: "user=a&USER=b" is ambiguous and refused. Like
// net/http, it reads the body only for POST, PUT and PATCH. The body is
// restored for the handler, byte for byte, and closing it closes the
// original body. opts bounds what is read; see [BodyOptions].
//
// Errors match [ErrNoKey] and, where one applies, [ErrUnsupportedMediaType]
// (another Content-Type or method) or [ErrBodyTooLarge]. They may match
// [ErrMalformedBody] (bad escapes, ';' separators, or the field given more
// than once, in any letter case), or [ErrValueTooLong]. A missing or empty
// field gives plain ErrNoKey.
func FormField(name string, opts BodyOptions) Func {
	return fieldFunc(name, opts, formBody)
}

// JSONField returns a Func keyed by the string field name of the top-level
// JSON object in the body, for Content-Type application/json or any type
// with a +json suffix. Keys are matched as encoding/json matches struct
// fields, case-insensitively, so {"user":"a","USER":"b"} is ambiguous and
// rejected. The whole object must be well-formed, with nothing after it,
// and fit in the read bound. The body is restored for the handler, byte for
// byte, and closing it closes the original body. opts bounds what is read;
// see [BodyOptions].
//
// Errors match [ErrNoKey] and, where one applies, [ErrUnsupportedMediaType],
// [ErrBodyTooLarge], [ErrMalformedBody] (bad JSON, not an object, a
// duplicate field, or a value that is not a string), or [ErrValueTooLong]. A
// missing or empty field gives plain ErrNoKey.
func JSONField(name string, opts BodyOptions) Func {
	return fieldFunc(name, opts, jsonBody)
}

// BodyField returns a Func keyed by the field name of the body. It parses
// JSON media types as [JSONField] does, and
// application/x-www-form-urlencoded as [FormField] does. It reads
// multipart/form-data (what a browser's FormData sends) from its form
// fields. File parts are never read. A file part under the field's name, or
// the field given more than once in any letter case, is malformed. The
// whole body must fit in opts.MaxBytes in every form. Other media types
// fail with [ErrUnsupportedMediaType].
func BodyField(name string, opts BodyOptions) Func {
	return fieldFunc(name, opts, anyBody)
}

func fieldFunc(name string, opts BodyOptions, forms bodyForms) Func {
	return func(r *http.Request) (string, error) {
		vs, err := readFields(r, opts, forms, []string{name}, nil)
		if err == nil {
			vs[0], err = checkValue(vs[0], opts)
		}
		if err != nil {
			return "", fmt.Errorf("keyfunc: body field %q: %w", name, err)
		}
		return vs[0], nil
	}
}

// BodyFields returns the values of the fields names in r's body, read once
// with the rules of [BodyField]. One reading of the body gives the guard's
// account field and the handler's other fields alike. A field that is
// absent gives "". It fails with an error matching [ErrNoKey] when the body
// cannot be read. The error also matches [ErrUnsupportedMediaType],
// [ErrBodyTooLarge] or [ErrMalformedBody], which includes any of names
// given more than once, in any letter case. It matches [ErrValueTooLong]
// for a value of names over opts.MaxValueBytes. The body is restored for
// the handler.
func BodyFields(r *http.Request, opts BodyOptions, names ...string) ([]string, error) {
	vs, err := readFields(r, opts, anyBody, names, nil)
	if err != nil {
		return nil, fmt.Errorf("keyfunc: body fields: %w", err)
	}
	return vs, nil
}

// BodyFieldAndSecret returns a reader of two fields of r's body in one
// reading: name, as [BodyField] reads it, and secret, such as a password.
// The secret is read with the same rules: given more than once in any
// letter case, it is malformed too. Its value is bounded only by
// opts.MaxBytes; absent or empty, it is "". Errors never hold its value.
// The body is restored for the handler.
func BodyFieldAndSecret(name, secret string, opts BodyOptions) func(r *http.Request) (value, secretValue string, err error) {
	names := []string{name, secret}
	maxes := []int{opts.maxValue(), int(opts.maxBytes())}
	return func(r *http.Request) (string, string, error) {
		vs, err := readFields(r, opts, anyBody, names, maxes)
		if err == nil {
			vs[0], err = checkValue(vs[0], opts)
		}
		if err != nil {
			return "", "", fmt.Errorf("keyfunc: body field %q: %w", name, err)
		}
		return vs[0], vs[1], nil
	}
}

// readFields reads the values of names from r's body, in one of forms.
// maxes[i] bounds the value of names[i]; nil means opts.MaxValueBytes for
// each.
func readFields(r *http.Request, opts BodyOptions, forms bodyForms, names []string, maxes []int) ([]string, error) {
	mt, params, err := mediaType(r)
	if err != nil {
		return nil, err
	}
	var form bodyForms
	switch {
	case mt == formType:
		form = formBody
	case mt == multipartType:
		form = multipartBody
	case isJSONType(mt):
		form = jsonBody
	}
	if form&forms == 0 {
		return nil, fmt.Errorf("Content-Type %s: %w", clip(mt, 64), ErrUnsupportedMediaType)
	}
	if form != jsonBody {
		switch r.Method {
		case http.MethodPost, http.MethodPut, http.MethodPatch:
		default:
			return nil, fmt.Errorf("method %s has no form body: %w", clip(r.Method, 16), ErrUnsupportedMediaType)
		}
	}
	boundary := params["boundary"]
	if form == multipartBody && boundary == "" {
		return nil, fmt.Errorf("multipart/form-data without boundary: %w", ErrUnsupportedMediaType)
	}
	body, err := readBody(r, opts.maxBytes())
	if err != nil {
		return nil, err
	}
	if maxes == nil {
		maxes = make([]int, len(names))
		for i := range maxes {
			maxes[i] = opts.maxValue()
		}
	}
	f := fields{names: names, vals: make([]string, len(names)), found: make([]bool, len(names)), max: maxes}
	switch form {
	case formBody:
		err = f.form(body)
	case multipartBody:
		err = f.multipart(body, boundary)
	default:
		err = f.json(body)
	}
	if err != nil {
		return nil, err
	}
	return f.vals, nil
}

// fields collects the values of names from one body.
type fields struct {
	names []string
	vals  []string
	found []bool
	max   []int // of each value
}

// index returns the index of key among names, matched case-insensitively,
// or -1.
func (f *fields) index(key string) int {
	for i, n := range f.names {
		if strings.EqualFold(key, n) {
			return i
		}
	}
	return -1
}

// set records the value of names[i], which must be found once.
func (f *fields) set(i int, v string) error {
	if f.found[i] {
		return fmt.Errorf("%w: field %q given more than once", ErrMalformedBody, clip(f.names[i], 64))
	}
	if len(v) > f.max[i] {
		return fmt.Errorf("field %q value of %d bytes over %d: %w", clip(f.names[i], 64), len(v), f.max[i], ErrValueTooLong)
	}
	f.vals[i], f.found[i] = v, true
	return nil
}

// form reads an urlencoded body, with url.ParseQuery's rules for
// separators and escapes.
func (f *fields) form(body []byte) error {
	for len(body) > 0 {
		var pair []byte
		pair, body, _ = bytes.Cut(body, []byte("&"))
		if bytes.IndexByte(pair, ';') >= 0 {
			return fmt.Errorf("%w: ';' in form body", ErrMalformedBody)
		}
		if len(pair) == 0 {
			continue
		}
		k, v, _ := bytes.Cut(pair, []byte("="))
		key := string(k)
		if bytes.ContainsAny(k, "%+") {
			var err error
			if key, err = url.QueryUnescape(key); err != nil {
				return fmt.Errorf("%w: bad escape in form key", ErrMalformedBody)
			}
		}
		i := f.index(key)
		if i < 0 {
			continue
		}
		val, err := url.QueryUnescape(string(v))
		if err != nil {
			return fmt.Errorf("%w: bad escape in form value", ErrMalformedBody)
		}
		if err := f.set(i, val); err != nil {
			return err
		}
	}
	return nil
}

// multipart reads the form fields of a multipart/form-data body. File parts
// are skipped unread, but one under a wanted name is malformed.
func (f *fields) multipart(body []byte, boundary string) error {
	mr := multipart.NewReader(bytes.NewReader(body), boundary)
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: multipart: %v", ErrMalformedBody, err)
		}
		name := p.FormName()
		i := f.index(name)
		if i < 0 || name == "" {
			continue
		}
		if p.FileName() != "" {
			return fmt.Errorf("%w: file part under field %q", ErrMalformedBody, clip(f.names[i], 64))
		}
		v, err := io.ReadAll(io.LimitReader(p, int64(f.max[i])+1))
		if err != nil {
			return fmt.Errorf("%w: multipart: %v", ErrMalformedBody, err)
		}
		if err := f.set(i, string(v)); err != nil {
			return err
		}
	}
}

// json reads the string values of the top-level fields of the JSON object
// body, with nothing after it.
func (f *fields) json(body []byte) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	malformed := func(err error) error {
		return fmt.Errorf("%w: %w", ErrMalformedBody, err)
	}
	tok, err := dec.Token()
	if err != nil {
		return malformed(err)
	}
	if tok != json.Delim('{') {
		return malformed(errors.New("not a JSON object"))
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return malformed(err)
		}
		key, _ := tok.(string)
		i := f.index(key)
		if i < 0 {
			if err := skipValue(dec); err != nil {
				return malformed(err)
			}
			continue
		}
		tok, err = dec.Token()
		if err != nil {
			return malformed(err)
		}
		s, ok := tok.(string)
		if !ok {
			return malformed(fmt.Errorf("field %q is not a string", clip(f.names[i], 64)))
		}
		if err := f.set(i, s); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return malformed(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return malformed(errors.New("data after the JSON object"))
	}
	return nil
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

// checkValue rejects empty and overlong field values.
func checkValue(v string, opts BodyOptions) (string, error) {
	if v == "" {
		return "", fmt.Errorf("field empty or absent: %w", ErrNoKey)
	}
	if max := opts.maxValue(); len(v) > max {
		return "", fmt.Errorf("field value of %d bytes over %d: %w", len(v), max, ErrValueTooLong)
	}
	return v, nil
}
