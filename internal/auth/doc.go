// Package auth implements Basic proxy authentication (RFC 7617, RFC 9110
// section 11.7) for the rustle forward proxy.
//
// An [Authenticator] holds the configured users, loaded from htpasswd files
// that contain only bcrypt hashes and from inline [User] entries, and checks
// Proxy-Authorization header values with [Authenticator.Check], and SOCKS5
// user names and passwords (RFC 1929) with [Authenticator.CheckUserPassword],
// which shares Check's cache and timing rules.
//
// bcrypt is slow by design, so verdicts are cached: the key is the SHA-256 of
// the header value (prefixed with a random per-Authenticator salt), the
// entry holds the verdict and the user name, and entries expire after
// Config.CacheTTL. A hit takes a read lock on one of several shards and
// allocates nothing. Wrong credentials are cached as wrong too, so repeating
// a bad value is cheap; values longer than [MaxValueLen] and malformed values
// are refused without running bcrypt and are not cached.
//
// Timing: user names are looked up by comparing SHA-256 digests in constant
// time against every configured user, plain passwords are compared as
// SHA-256 digests in constant time, and a cache miss for an unknown user or a
// plain-password user runs one bcrypt comparison against a dummy hash, so a
// miss costs about one bcrypt comparison whatever the user name.
package auth
