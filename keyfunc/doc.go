// Package keyfunc derives rate-limit keys from HTTP requests.
//
// A [Func] turns a request into a string key, or reports that the request
// carries no usable key by returning an error that matches [ErrNoKey]. The
// package knows nothing of counting or storage: it only decides which
// requests share a bucket. Every Func treats the request as hostile input.
// A malformed or oversized header or body never panics, and never yields a
// key chosen by the client where the client must not choose it.
//
// The building blocks are:
//
//   - [IP] and [NewIP]: the client address. They honour X-Forwarded-For or
//     Forwarded (RFC 7239), whichever one is configured, only from
//     configured trusted proxies. IPv6 addresses are grouped by network
//     prefix (/64 by default). 6to4 and NAT64 addresses are keyed by the
//     IPv4 address they carry.
//   - [CallerID]: an authenticated caller identity placed in the request
//     context by the application's authentication middleware.
//   - [Header]: the value of one request header.
//   - [FormField], [JSONField] and [BodyField]: a field of the request body,
//     read from a bounded prefix; the body is restored for the handler.
//   - [Account] with [NormalizeUsername], [NormalizeEmail] and
//     [NormalizePhone]: an account name from the body, canonicalised so that
//     different spellings of one account share one key.
//   - [Join] and [JoinKeys]: composite keys whose parts cannot collide.
//
// Keys from different Funcs live in different spaces only by convention: a
// caller ID may look like an IP key. Give each limiter its own store
// namespace, or prefix keys with [Join].
package keyfunc
