package config

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// Authz configures the external decision service ([authz]): once a
// request has passed authentication, the limits and the access rules,
// rustle POSTs a small JSON document about it (listener, user, groups,
// client address, destination host and port, method, protocol, and the
// server name of a tunnel's ClientHello when the tunnel reads it) to
// URL, and the answer allows or denies it (see package authz). Its zero
// value means no decision service: the rules alone decide.
type Authz struct {
	// URL is where the documents are POSTed, an https:// URL (or http://
	// with InsecurePlaintext) such as Open Policy Agent's data API,
	// "http://127.0.0.1:8181/v1/data/rustle/authz". "" means no
	// decision service, and every other key of [authz] is refused.
	URL string `toml:"url"`
	// InsecurePlaintext allows an http:// URL, whose answers anyone on
	// the path could forge: only for a loopback host (a sidecar). false
	// refuses http://.
	InsecurePlaintext bool `toml:"insecure_plaintext"`
	// TLSCA is a PEM bundle of the CAs that sign the service's
	// certificate; [Load] resolves a relative path. "" means the
	// system's roots.
	TLSCA string `toml:"tls_ca"`
	// TokenFile is a file whose first line is a bearer token sent to the
	// service as "Authorization: Bearer TOKEN", read at start and on
	// reload; [Load] resolves a relative path. "" means no
	// Authorization field.
	TokenFile string `toml:"token_file"`
	// Timeout bounds one decision as a whole: the wait for a free call
	// (see MaxInFlight), the connection, the request and the answer.
	// Zero means 2s.
	Timeout Duration `toml:"timeout"`
	// MaxInFlight bounds the calls to the service in progress at once,
	// and the connections kept to it; a decision that finds them all
	// busy waits for one within Timeout. 0 means 64.
	MaxInFlight int `toml:"max_in_flight"`
	// CacheSize bounds the decisions cached (least recently used
	// evicted first), keyed by the whole document; 0 means 10000 and -1
	// caches none.
	CacheSize int `toml:"cache_size"`
	// CacheTTL is how long a decision is cached when the answer gives no
	// ttl, and the longest an answer's ttl may keep it; zero means 60s.
	CacheTTL Duration `toml:"cache_ttl"`
	// OnError says what a request gets when the service cannot decide
	// it (timeout, unreachable, every call busy, a status other than
	// 200, an answer that is not one): "deny" (503, reason
	// authz-unavailable) or "allow" (the rules' verdict stands). ""
	// means "deny".
	OnError string `toml:"on_error"`
}

// The values of authz.on_error.
const (
	// AuthzDeny refuses a request the service could not decide.
	AuthzDeny = "deny"
	// AuthzAllow lets it through on the rules' verdict.
	AuthzAllow = "allow"
)

// Defaults of [authz], applied by [Config.SetDefaults] when authz.url is
// set.
const (
	defaultAuthzTimeout   = 2 * time.Second
	defaultAuthzInFlight  = 64
	defaultAuthzCacheSize = 10000
	defaultAuthzCacheTTL  = time.Minute
	defaultAuthzOnError   = AuthzDeny
	authzCacheOff         = -1 // cache_size: no cache
	maxAuthzInFlight      = 4096
	minAuthzTimeout       = time.Millisecond
)

// On reports whether a decision service is configured.
func (a *Authz) On() bool { return a.URL != "" }

// setDefaults fills [authz]'s defaults when a service is configured; a
// zero [authz] stays zero, so that Validate can refuse keys set without
// a url.
func (a *Authz) setDefaults() {
	if !a.On() {
		return
	}
	setDuration(&a.Timeout, defaultAuthzTimeout)
	setInt(&a.MaxInFlight, defaultAuthzInFlight)
	setInt(&a.CacheSize, defaultAuthzCacheSize)
	setDuration(&a.CacheTTL, defaultAuthzCacheTTL)
	setString(&a.OnError, defaultAuthzOnError)
}

// validateAuthz checks [authz].
func (c *Config) validateAuthz(v *validator) {
	a := c.Authz
	if !a.On() {
		for _, k := range []struct {
			name string
			set  bool
		}{
			{"insecure_plaintext", a.InsecurePlaintext}, {"tls_ca", a.TLSCA != ""}, {"token_file", a.TokenFile != ""},
			{"timeout", a.Timeout.Duration != 0}, {"max_in_flight", a.MaxInFlight != 0},
			{"cache_size", a.CacheSize != 0}, {"cache_ttl", a.CacheTTL.Duration != 0}, {"on_error", a.OnError != ""},
		} {
			if k.set {
				v.add("authz."+k.name, errors.New("is only for a decision service: set authz.url"))
			}
		}
		return
	}
	u, err := url.Parse(a.URL)
	switch {
	case err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") || u.User != nil || u.Fragment != "":
		v.add("authz.url", fmt.Errorf("%q: want https://host[:port]/path, without credentials or a fragment", a.URL))
	case u.Scheme == "http" && !a.InsecurePlaintext:
		v.add("authz.url", errors.New("an http:// decision service's answers can be forged by anyone on the path: use https://, or insecure_plaintext = true for a loopback address"))
	case u.Scheme == "http" && !isLoopback(u.Hostname()):
		v.add("authz.insecure_plaintext", fmt.Errorf("is only for a loopback address, not %q", u.Hostname()))
	case u.Scheme == "https" && a.InsecurePlaintext:
		v.add("authz.insecure_plaintext", errors.New("is for an http:// url"))
	}
	v.check(u == nil || u.Scheme != "http" || a.TLSCA == "", "authz.tls_ca", "is for an https:// url")
	v.check(!strings.ContainsRune(a.TokenFile, 0), "authz.token_file", "contains a NUL byte")
	v.check(a.Timeout.Duration >= minAuthzTimeout, "authz.timeout", "%s is under %s", a.Timeout.Duration, minAuthzTimeout)
	v.check(a.MaxInFlight > 0 && a.MaxInFlight <= maxAuthzInFlight, "authz.max_in_flight", "%d is not in 1..%d", a.MaxInFlight, maxAuthzInFlight)
	v.check(a.CacheSize > 0 || a.CacheSize == authzCacheOff, "authz.cache_size", "%d is neither positive nor -1 (no cache)", a.CacheSize)
	v.positive("authz.cache_ttl", a.CacheTTL)
	v.oneOf("authz.on_error", a.OnError, []string{AuthzDeny, AuthzAllow})
}
