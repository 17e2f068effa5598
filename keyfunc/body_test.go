package keyfunc

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func bodyRequest(method, contentType, body string) *http.Request {
	r := httptest.NewRequest(method, "/signin", strings.NewReader(body))
	if contentType != "" {
		r.Header.Set("Content-Type", contentType)
	}
	return r
}

// field returns a Func keyed by the body field name, read by BodyFields:
// an empty or absent value is no key, as a guard takes it.
func field(name string, opts BodyOptions) Func {
	return func(r *http.Request) (string, error) {
		vs, err := BodyFields(r, opts, name)
		if err != nil {
			return "", err
		}
		if vs[0] == "" {
			return "", fmt.Errorf("field %q empty or absent: %w", name, ErrNoKey)
		}
		return vs[0], nil
	}
}

const (
	ctForm = "application/x-www-form-urlencoded"
	ctJSON = "application/json"
	// ctMultipart has the boundary "B".
	ctMultipart = "multipart/form-data; boundary=B"
)

func TestBodyField(t *testing.T) {
	tests := []struct {
		name    string
		method  string // default POST
		ct      string
		body    string
		opts    BodyOptions
		want    string
		wantErr error
	}{
		// Forms.
		{name: "form", ct: ctForm, body: "username=alice&password=x", want: "alice"},
		{name: "form escapes", ct: ctForm, body: "pw=1&user%6eame=al+ice%21", want: "al ice!"},
		{name: "form charset param", ct: "Application/X-WWW-Form-Urlencoded; charset=utf-8", body: "username=alice", want: "alice"},
		{name: "form put", method: http.MethodPut, ct: ctForm, body: "username=alice", want: "alice"},
		{name: "form get", method: http.MethodGet, ct: ctForm, body: "username=alice", wantErr: ErrUnsupportedMediaType},
		{name: "form absent", ct: ctForm, body: "user=alice", wantErr: ErrNoKey},
		{name: "form empty value", ct: ctForm, body: "username=&a=b", wantErr: ErrNoKey},
		{name: "form no value", ct: ctForm, body: "username", wantErr: ErrNoKey},
		{name: "form duplicate", ct: ctForm, body: "username=alice&username=bob", wantErr: ErrMalformedBody},
		{name: "form duplicate escaped", ct: ctForm, body: "username=alice&user%6Eame=bob", wantErr: ErrMalformedBody},
		{name: "form semicolon", ct: ctForm, body: "username=alice;x=y", wantErr: ErrMalformedBody},
		{name: "form bad escape in key", ct: ctForm, body: "a%zz=1&username=alice", wantErr: ErrMalformedBody},
		{name: "form bad escape in value", ct: ctForm, body: "username=al%c", wantErr: ErrMalformedBody},
		{name: "form value too long", ct: ctForm, body: "username=" + strings.Repeat("a", 300), wantErr: ErrValueTooLong},
		{name: "form value bound configurable", ct: ctForm, body: "username=" + strings.Repeat("a", 300), opts: BodyOptions{MaxValueBytes: 300}, want: strings.Repeat("a", 300)},
		{name: "form over read bound", ct: ctForm, body: "username=alice&pad=" + strings.Repeat("x", 100), opts: BodyOptions{MaxBytes: 50}, wantErr: ErrBodyTooLarge},
		{name: "empty body", ct: ctForm, body: "", wantErr: ErrNoKey},

		// JSON.
		{name: "json", ct: ctJSON, body: `{"username":"alice","password":"x"}`, want: "alice"},
		{name: "json suffix type", ct: "application/vnd.api+json; charset=utf-8", body: `{"username":"alice"}`, want: "alice"},
		{name: "json escapes", ct: ctJSON, body: `{"user\u006eame":"al\u0069ce\n"}`, want: "alice\n"},
		{name: "json case-insensitive key", ct: ctJSON, body: `{"UserName":"alice"}`, want: "alice"},
		{name: "json skips nested", ct: ctJSON, body: `{"a":{"username":"bob","b":[1,{"c":null}]},"n":1.5,"t":true,"username":"alice"}`, want: "alice"},
		{name: "json duplicate", ct: ctJSON, body: `{"username":"alice","username":"bob"}`, wantErr: ErrMalformedBody},
		{name: "json duplicate by case", ct: ctJSON, body: `{"username":"alice","USERNAME":"bob"}`, wantErr: ErrMalformedBody},
		{name: "json duplicate by unicode fold", ct: ctJSON, body: `{"username":"alice","u\u017Fername":"bob"}`, wantErr: ErrMalformedBody},
		{name: "json number", ct: ctJSON, body: `{"username":42}`, wantErr: ErrMalformedBody},
		{name: "json null", ct: ctJSON, body: `{"username":null}`, wantErr: ErrMalformedBody},
		{name: "json object value", ct: ctJSON, body: `{"username":{"x":"alice"}}`, wantErr: ErrMalformedBody},
		{name: "json array top", ct: ctJSON, body: `["username","alice"]`, wantErr: ErrMalformedBody},
		{name: "json truncated", ct: ctJSON, body: `{"username":"alice",`, wantErr: ErrMalformedBody},
		{name: "json syntax", ct: ctJSON, body: `{"username" "alice"}`, wantErr: ErrMalformedBody},
		{name: "json absent", ct: ctJSON, body: `{"user":"alice"}`, wantErr: ErrNoKey},
		{name: "json empty", ct: ctJSON, body: `{"username":""}`, wantErr: ErrNoKey},
		{name: "json over read bound", ct: ctJSON, body: `{"username":"alice","pad":"` + strings.Repeat("x", 100) + `"}`, opts: BodyOptions{MaxBytes: 50}, wantErr: ErrBodyTooLarge},
		{name: "empty json body", ct: ctJSON, body: "", wantErr: ErrMalformedBody},

		// Media types.
		{name: "no content type", body: "username=alice", wantErr: ErrUnsupportedMediaType},
		{name: "text plain", ct: "text/plain", body: "username=alice", wantErr: ErrUnsupportedMediaType},
		{name: "bad content type", ct: "application/json; =", body: `{"username":"alice"}`, wantErr: ErrUnsupportedMediaType},
		{name: "bad content type parameter", ct: "application/json; charset", body: `{"username":"alice"}`, wantErr: ErrUnsupportedMediaType},
		{name: "json with charset", ct: "application/json; charset=utf-8", body: `{"username":"alice"}`, want: "alice"},

		// Duplicates in any case, and the one value bound.
		{name: "form duplicate by case", ct: ctForm, body: "username=alice&password=x&USERNAME=zzz", wantErr: ErrMalformedBody},
		{name: "form duplicate after other fields", ct: ctForm, body: "username=alice&password=correct-horse&username=zzz", wantErr: ErrMalformedBody},
		{name: "form case-insensitive key", ct: ctForm, body: "UserName=alice", want: "alice"},
		{name: "form value padded over bound", ct: ctForm, body: "username=alice" + strings.Repeat("%20", maxAccountInput), wantErr: ErrValueTooLong},
		{name: "form value at bound", ct: ctForm, body: "username=" + strings.Repeat("a", maxAccountInput), want: strings.Repeat("a", maxAccountInput)},
		{name: "json trailing data", ct: ctJSON, body: `{"username":"alice"} {"username":"bob"}`, wantErr: ErrMalformedBody},
		{name: "json trailing space", ct: ctJSON, body: "{\"username\":\"alice\"}\n ", want: "alice"},

		// multipart/form-data.
		{name: "multipart field", ct: ctMultipart, body: mp(part("username", "", "alice"), part("password", "", "x")), want: "alice"},
		{name: "multipart field case-insensitive", ct: ctMultipart, body: mp(part("USERNAME", "", "alice")), want: "alice"},
		{name: "multipart duplicate by case", ct: ctMultipart, body: mp(part("username", "", "alice"), part("Username", "", "bob")), wantErr: ErrMalformedBody},
		{name: "multipart file part skipped", ct: ctMultipart, body: mp(part("avatar", "a.png", strings.Repeat("\x00", 1000)), part("username", "", "alice")), want: "alice"},
		{name: "multipart file part under the field", ct: ctMultipart, body: mp(part("username", "u.txt", "alice")), wantErr: ErrMalformedBody},
		{name: "multipart value over bound", ct: ctMultipart, body: mp(part("username", "", strings.Repeat("a", maxAccountInput+1))), wantErr: ErrValueTooLong},
		{name: "multipart absent", ct: ctMultipart, body: mp(part("user", "", "alice")), wantErr: ErrNoKey},
		{name: "multipart empty form", ct: ctMultipart, body: "--B--\r\n", wantErr: ErrNoKey},
		{name: "multipart truncated", ct: ctMultipart, body: "--B\r\nContent-Disposition: form-data; name=\"username\"\r\n\r\nalice", wantErr: ErrMalformedBody},
		{name: "multipart no boundary", ct: "multipart/form-data", body: mp(part("username", "", "alice")), wantErr: ErrUnsupportedMediaType},
		{name: "multipart other boundary", ct: "multipart/form-data; boundary=C", body: mp(part("username", "", "alice")), wantErr: ErrMalformedBody},
		{name: "multipart over read bound", ct: ctMultipart, body: mp(part("pad", "", strings.Repeat("x", 100)), part("username", "", "alice")), opts: BodyOptions{MaxBytes: 80}, wantErr: ErrBodyTooLarge},
		{name: "multipart get", method: http.MethodGet, ct: ctMultipart, body: mp(part("username", "", "alice")), wantErr: ErrUnsupportedMediaType},
		{name: "multipart/mixed", ct: "multipart/mixed; boundary=B", body: mp(part("username", "", "alice")), wantErr: ErrUnsupportedMediaType},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			method := tt.method
			if method == "" {
				method = http.MethodPost
			}
			r := bodyRequest(method, tt.ct, tt.body)
			got, err := field("username", tt.opts)(r)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || !errors.Is(err, ErrNoKey) {
					t.Errorf("BodyField = %q, %v; want error %v", got, err, tt.wantErr)
				}
			} else if err != nil || got != tt.want {
				t.Errorf("BodyField = %q, %v; want %q", got, err, tt.want)
			}
			rest, err := io.ReadAll(r.Body)
			if err != nil || string(rest) != tt.body {
				t.Errorf("body after BodyField = %q, %v; want original %q", rest, err, tt.body)
			}
		})
	}
}

// part is one part of a multipart/form-data body with boundary "B"; a
// filename makes it a file part.
func part(name, filename, value string) string {
	d := fmt.Sprintf("form-data; name=%q", name)
	if filename != "" {
		d += fmt.Sprintf("; filename=%q", filename)
	}
	return "--B\r\nContent-Disposition: " + d + "\r\n\r\n" + value + "\r\n"
}

// mp joins parts into a multipart/form-data body with boundary "B".
func mp(parts ...string) string { return strings.Join(parts, "") + "--B--\r\n" }

// BodyFields reads several fields in one reading, with BodyField's rules.
func TestBodyFields(t *testing.T) {
	tests := []struct {
		name, ct, body string
		want           []string
		wantErr        error
	}{
		{"form", ctForm, "username=alice&password=correct-horse", []string{"alice", "correct-horse"}, nil},
		{"form password absent", ctForm, "username=alice", []string{"alice", ""}, nil},
		{"form password duplicate", ctForm, "username=alice&password=a&PASSWORD=b", nil, ErrMalformedBody},
		{"json", ctJSON, `{"username":"alice","password":"correct-horse"}`, []string{"alice", "correct-horse"}, nil},
		{"json duplicate by case", ctJSON, `{"username":"alice","password":"correct-horse","USERNAME":"x"}`, nil, ErrMalformedBody},
		{"multipart", ctMultipart, mp(part("username", "", "alice"), part("password", "", "correct-horse")), []string{"alice", "correct-horse"}, nil},
		{"unsupported", "text/plain", "username=alice", nil, ErrUnsupportedMediaType},
	}
	for _, tt := range tests {
		r := bodyRequest(http.MethodPost, tt.ct, tt.body)
		got, err := BodyFields(r, BodyOptions{}, "username", "password")
		if tt.wantErr != nil {
			if !errors.Is(err, tt.wantErr) || !errors.Is(err, ErrNoKey) {
				t.Errorf("%s: BodyFields = %q, %v; want error %v", tt.name, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || strings.Join(got, "|") != strings.Join(tt.want, "|") {
			t.Errorf("%s: BodyFields = %q, %v; want %q", tt.name, got, err, tt.want)
		}
		if rest, _ := io.ReadAll(r.Body); string(rest) != tt.body {
			t.Errorf("%s: body not restored: %q", tt.name, rest)
		}
	}
}

// BodyFields reads a form and a JSON body alike, and no body without a
// Content-Type.
func TestBodyFieldsMediaType(t *testing.T) {
	if k, err := field("u", BodyOptions{})(bodyRequest(http.MethodPost, ctForm, "u=a")); k != "a" || err != nil {
		t.Errorf("form = %q, %v", k, err)
	}
	if k, err := field("u", BodyOptions{})(bodyRequest(http.MethodPost, ctJSON, `{"u":"a"}`)); k != "a" || err != nil {
		t.Errorf("JSON = %q, %v", k, err)
	}
	if _, err := field("u", BodyOptions{})(bodyRequest(http.MethodPost, "", "u=a")); !errors.Is(err, ErrUnsupportedMediaType) {
		t.Errorf("without Content-Type: %v", err)
	}
}

// countingBody is an endless body that counts the bytes read from it and
// whether it was closed.
type countingBody struct {
	limit  int64 // bytes available
	read   int64
	closed bool
}

func (c *countingBody) Read(p []byte) (int, error) {
	if c.read >= c.limit {
		return 0, io.EOF
	}
	n := min(int64(len(p)), c.limit-c.read) // contents left as they are
	c.read += n
	return int(n), nil
}

func (c *countingBody) Close() error { c.closed = true; return nil }

func TestBodyFieldReadsAtMostBound(t *testing.T) {
	const size = 100 << 20
	tests := []struct {
		name          string
		ct            string
		contentLength int64
		max           int64
		wantRead      int64
	}{
		{"form unknown length", ctForm, -1, 0, DefaultMaxBodyBytes},
		{"json unknown length", ctJSON, -1, 0, DefaultMaxBodyBytes},
		{"custom bound", ctJSON, -1, 1000, 1000},
		{"known length over bound reads nothing", ctForm, size, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := &countingBody{limit: size}
			r := httptest.NewRequest(http.MethodPost, "/", nil)
			r.Body, r.ContentLength = body, tt.contentLength
			r.Header.Set("Content-Type", tt.ct)
			_, err := field("username", BodyOptions{MaxBytes: tt.max})(r)
			if !errors.Is(err, ErrBodyTooLarge) {
				t.Errorf("error = %v, want ErrBodyTooLarge", err)
			}
			if body.read != tt.wantRead {
				t.Errorf("read %d bytes, want %d", body.read, tt.wantRead)
			}
			n, err := io.Copy(io.Discard, r.Body)
			if err != nil || n != size {
				t.Errorf("handler reads %d bytes, %v; want %d", n, err, size)
			}
			if err := r.Body.Close(); err != nil || !body.closed {
				t.Errorf("Close = %v, original closed = %v", err, body.closed)
			}
		})
	}
}

func TestBodyExactlyAtBound(t *testing.T) {
	body := "username=alice&p=" + strings.Repeat("x", 10)
	max := int64(len(body))
	// Known length equal to the bound: complete.
	r := bodyRequest(http.MethodPost, ctForm, body)
	if k, err := field("username", BodyOptions{MaxBytes: max})(r); err != nil || k != "alice" {
		t.Errorf("at bound with ContentLength: %q, %v", k, err)
	}
	// Unknown length: cannot tell without reading more, so too large.
	r = bodyRequest(http.MethodPost, ctForm, body)
	r.ContentLength = -1
	if _, err := field("username", BodyOptions{MaxBytes: max})(r); !errors.Is(err, ErrBodyTooLarge) {
		t.Errorf("at bound without ContentLength: %v", err)
	}
	if rest, _ := io.ReadAll(r.Body); string(rest) != body {
		t.Errorf("body not restored: %q", rest)
	}
}

func TestBodyRestoredByteForByte(t *testing.T) {
	// Binary-ish JSON body with every byte value in a string, and a tail
	// past a small bound.
	var raw bytes.Buffer
	raw.WriteString(`{"username":"alice","blob":"`)
	for i := 0x20; i < 0x7f; i++ {
		if i != '"' && i != '\\' {
			raw.WriteByte(byte(i))
		}
	}
	raw.WriteString("\u00e9\u4e16\"}")
	for _, ct := range []string{ctJSON, ctForm} {
		body := raw.String()
		if ct == ctForm {
			body = "username=alice&blob=%00%FF%e9+x&z"
		}
		r := bodyRequest(http.MethodPost, ct, body)
		orig := r.Body
		k, err := field("username", BodyOptions{})(r)
		if err != nil || k != "alice" {
			t.Fatalf("%s: BodyField = %q, %v", ct, k, err)
		}
		// A second Func reading the same request sees the same body.
		if k2, err := field("username", BodyOptions{})(r); err != nil || k2 != k {
			t.Fatalf("%s: second BodyField = %q, %v", ct, k2, err)
		}
		got, err := io.ReadAll(r.Body)
		if err != nil || !bytes.Equal(got, []byte(body)) {
			t.Errorf("%s: restored body = %q, %v; want %q", ct, got, err, body)
		}
		if r.Body == orig {
			t.Errorf("%s: body not replaced", ct)
		}
	}
}

type errBody struct{ err error }

func (e errBody) Read([]byte) (int, error) { return 0, e.err }
func (errBody) Close() error               { return nil }

func TestBodyReadError(t *testing.T) {
	boom := errors.New("connection reset")
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	r.Body = io.NopCloser(io.MultiReader(strings.NewReader("username=al"), errBody{boom}))
	r.Header.Set("Content-Type", ctForm)
	_, err := field("username", BodyOptions{})(r)
	if !errors.Is(err, boom) || !errors.Is(err, ErrNoKey) {
		t.Errorf("error = %v, want wrapping %v and ErrNoKey", err, boom)
	}
	got, err := io.ReadAll(r.Body)
	if string(got) != "username=al" || !errors.Is(err, boom) {
		t.Errorf("handler sees %q, %v; want the same prefix and error", got, err)
	}
}

func TestNoBody(t *testing.T) {
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	r.Header.Set("Content-Type", ctJSON)
	if _, err := field("u", BodyOptions{})(r); !errors.Is(err, ErrNoKey) {
		t.Errorf("no body: %v", err)
	}
}

func BenchmarkBodyField(b *testing.B) {
	for _, bc := range []struct{ name, ct, body string }{
		{"form", ctForm, "username=alice&password=correct+horse+battery+staple&remember=1"},
		{"json", ctJSON, `{"username":"alice","password":"correct horse battery staple","remember":true}`},
	} {
		b.Run(bc.name, func(b *testing.B) {
			f := field("username", BodyOptions{})
			b.ReportAllocs()
			for b.Loop() {
				if _, err := f(bodyRequest(http.MethodPost, bc.ct, bc.body)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
