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
	// as sent: 256, the one bound on an account value, which the Normalize
	// functions apply too.
	DefaultMaxValueBytes = maxAccountInput
)

// BodyOptions bound what [BodyFields] reads.
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

// The body forms BodyFields reads.
type bodyForms uint8

const (
	formBody bodyForms = 1 << iota
	multipartBody
	jsonBody
)

// BodyFields returns the values of the fields names in r's body, read once:
// the one reader of a body field. One reading gives the guard's account
// field and the handler's other fields alike. The body is restored for the
// handler, byte for byte, and closing it closes the original body. A field
// that is absent gives "". Names match in any letter case.
//
// It reads application/x-www-form-urlencoded (with url.ParseQuery's
// separators and escapes) and multipart/form-data (what a browser's FormData
// sends) from their form fields, for POST, PUT and PATCH as net/http does.
// File parts are never read. It reads the string members of the top-level
// JSON object of application/json, or any type with a +json suffix, in any
// method; the whole object must be well-formed, with nothing after it. The
// whole body must fit in opts.MaxBytes in every form.
//
// It fails with an error matching [ErrNoKey] when the body cannot be read.
// The error also matches [ErrUnsupportedMediaType] (another Content-Type or
// method), [ErrBodyTooLarge] or [ErrMalformedBody]. Malformed includes bad
// escapes, ';' separators, bad JSON, a value that is not a string, a file
// part under one of names, or one of names given more than once, in any
// letter case. It matches [ErrValueTooLong] for a value of names over
// opts.MaxValueBytes. A handler that reads a field in another case than the
// guard did can so never see a value the guard did not count.
func BodyFields(r *http.Request, opts BodyOptions, names ...string) ([]string, error) {
	vs, err := readFields(r, opts, names)
	if err != nil {
		return nil, fmt.Errorf("keyfunc: body fields: %w", err)
	}
	return vs, nil
}

// readFields reads the values of names from r's body, each bounded by
// opts.MaxValueBytes.
func readFields(r *http.Request, opts BodyOptions, names []string) ([]string, error) {
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
	if form == 0 {
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
	f := fields{names: names, vals: make([]string, len(names)), found: make([]bool, len(names)), max: opts.maxValue()}
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
	max   int // of a value
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
	if len(v) > f.max {
		return fmt.Errorf("field %q value of %d bytes over %d: %w", clip(f.names[i], 64), len(v), f.max, ErrValueTooLong)
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
		v, err := io.ReadAll(io.LimitReader(p, int64(f.max)+1))
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
