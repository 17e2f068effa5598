package sqlite

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/gatecount/gatecount/store/storekit"
)

// ErrNotSQLiteURL is returned by [ParseURL] for a URL that does not name an
// SQLite file.
var ErrNotSQLiteURL = errors.New("sqlite: not an sqlite: or file: URL")

// ParseURL returns the path of the SQLite file a database URL names, so that
// a setting such as DATABASE_URL can select this store. It accepts:
//
//	sqlite:PATH          sqlite:/var/lib/app/limits.db, sqlite:limits.db
//	sqlite://PATH        sqlite:///var/lib/app/limits.db (an empty host)
//	file:PATH            file:/var/lib/app/limits.db, file:limits.db
//	file://PATH          file:///var/lib/app/limits.db
//
// A relative PATH is relative to the working directory. Percent-escapes in
// PATH are decoded. A URL of another scheme (postgres:, redis:) returns an
// error matching [ErrNotSQLiteURL], so a caller can try each store in turn.
// A query string, a host, an empty path or an in-memory database is refused
// with a descriptive error. No other connection or process could share an
// in-memory database (":memory:").
func ParseURL(s string) (path string, err error) {
	scheme, rest, ok := strings.Cut(s, ":")
	if !ok || (!strings.EqualFold(scheme, "sqlite") && !strings.EqualFold(scheme, "file")) {
		return "", fmt.Errorf("%w: %q", ErrNotSQLiteURL, storekit.RedactURL(s))
	}
	if strings.ContainsAny(rest, "?#") {
		return "", fmt.Errorf("sqlite: URL %q: query strings and fragments are not supported", storekit.RedactURL(s))
	}
	if strings.HasPrefix(rest, "//") {
		host, p, _ := strings.Cut(rest[2:], "/")
		if host != "" && !strings.EqualFold(host, "localhost") {
			return "", fmt.Errorf("sqlite: URL %q names host %q: an SQLite file is shared only on its own host", s, host)
		}
		rest = "/" + p
	}
	path, err = url.PathUnescape(rest)
	if err != nil {
		return "", fmt.Errorf("sqlite: URL %q: %w", s, err)
	}
	switch {
	case path == "" || path == "/":
		return "", fmt.Errorf("sqlite: URL %q names no file", s)
	case path == ":memory:" || strings.HasPrefix(path, ":memory:"):
		return "", fmt.Errorf("sqlite: URL %q names an in-memory database, which no other process shares: use the memory store", s)
	}
	return path, nil
}
