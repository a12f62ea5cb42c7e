package wire

import (
	"fmt"

	"github.com/rustle-proxy/rustle/internal/authz"
	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/origin"
)

// authz makes the decision service's client of [authz], none when cfg
// has none, or takes the previous generation's when [authz] and its
// token are the same, so that a reload keeps the cached decisions and
// the connections to the service. A client a reload drops closes its
// idle connections after the transport's idle timeout.
func (b *builder) authz() error {
	cfg := b.cfg
	a := &cfg.Authz
	if !a.On() {
		return nil
	}
	var token string
	if a.TokenFile != "" {
		var err error
		if token, err = authz.ReadToken(a.TokenFile); err != nil {
			return cfg.KeyError("authz.token_file", err)
		}
	}
	if p := b.prev; p != nil && p.Authz != nil && p.Config.Authz == *a && p.authzToken == token {
		b.g.Authz, b.g.authzToken = p.Authz, token
		return nil
	}
	tc, err := providerTLS(a.TLSCA)
	if err != nil {
		return cfg.KeyError("authz.tls_ca", err)
	}
	onError := authz.Deny
	if a.OnError == config.AuthzAllow {
		onError = authz.Allow
	}
	c, err := authz.New(authz.Config{
		URL: a.URL, TLS: tc, Token: token, Timeout: a.Timeout.Duration, MaxInFlight: a.MaxInFlight,
		CacheSize: a.CacheSize, CacheTTL: a.CacheTTL.Duration, OnError: onError, CheckHeader: authzHeader,
		Metrics: b.env.Metrics.Authz(), Logger: b.log,
	})
	if err != nil {
		return cfg.KeyError("authz.url", err)
	}
	b.g.Authz, b.g.authzToken = c, token
	return nil
}

// authzHeader checks a field the decision service's answer asks to add
// to a forwarded request as a header rule's field is checked
// (origin.CheckRuleField, origin.CheckRuleValue): none of the fields
// rustle makes for each hop itself, that frame or address the message,
// or that carry its loop detection, with a value rustle can write. The
// error names the field, never its value.
func authzHeader(name, value string) error {
	if err := origin.CheckRuleField(name); err != nil {
		return err
	}
	if err := origin.CheckRuleValue(value); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}
