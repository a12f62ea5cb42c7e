package wire

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"maps"
	"os"
	"slices"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/httpproxy"
	"github.com/rustle-proxy/rustle/internal/intercept"
	"github.com/rustle-proxy/rustle/internal/origin"
)

// interception makes the generation's Interceptor from [intercept]: the
// CA (read at each build), the leaves' cache (the previous
// generation's, while its CA and bound are the same: a reload that
// changes the CA mints anew for new tunnels, open ones run on with the
// leaves they have), the origins' roots, and each rule's criteria and
// header edits, their {file:} values read now; and the origin client of
// each rule's front-ends (TLS to origins, the rule's edits).
func (b *builder) interception() error {
	ic := &b.cfg.Intercept
	if !ic.Enabled() {
		return nil
	}
	ca, err := intercept.LoadCA(ic.CACert, ic.CAKey)
	if err != nil {
		return b.cfg.KeyError("intercept.ca_cert", err)
	}
	var certs *intercept.Certs
	if p := b.prev; p != nil && p.Intercept != nil {
		if c := p.Intercept.Certs(); c.CA().ID() == ca.ID() && c.Max() == ic.CacheSize {
			certs = c
		}
	}
	if certs == nil {
		if certs, err = intercept.NewCerts(ca, ic.CacheSize); err != nil {
			return fmt.Errorf("wire: %w", err)
		}
	}
	roots, err := upstreamRoots(ic.UpstreamCA)
	if err != nil {
		return b.cfg.KeyError("intercept.upstream_ca", err)
	}
	upstream := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12,
		ClientSessionCache: tls.NewLRUClientSessionCache(0)}
	cfg := intercept.Config{Certs: certs, Groups: b.cfg.ACL.Groups, ProviderGroups: b.cfg.ProviderGroups(),
		Bypass: ic.Bypass, HandshakeTimeout: b.cfg.Timeouts.ReadHeader.Duration, Logger: b.log}
	b.icOrigins = nil
	for i, r := range ic.Rules {
		key := fmt.Sprintf("intercept.rules[%d]", i)
		rule := intercept.Rule{Name: r.Name, Match: r.Criteria.Rule()}
		if err := b.withLists(key, r.Criteria, &rule.Match); err != nil {
			return err
		}
		if rule.Edits, err = interceptEdits(b.cfg, key, &r); err != nil {
			return err
		}
		cfg.Rules = append(cfg.Rules, rule)
		oc := *b.oc.Config()
		oc.TLS, oc.TLSHandshakeTimeout, oc.Edits = upstream, b.cfg.Timeouts.Connect.Duration, rule.Edits
		client, err := origin.New(oc)
		if err != nil {
			return fmt.Errorf("wire: %s: %w", key, err)
		}
		b.icOrigins = append(b.icOrigins, client)
	}
	if b.g.Intercept, err = intercept.New(cfg); err != nil {
		return fmt.Errorf("wire: %w", err)
	}
	return nil
}

// upstreamRoots returns the roots that verify intercepted tunnels'
// origins: the PEM certificates of path, or the system's when path is
// "".
func upstreamRoots(path string) (*x509.CertPool, error) {
	if path == "" {
		return x509.SystemCertPool()
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}

// interceptEdits compiles the header edits of the rule at key, its
// {file:} references read now (see readHeaderFile), each value then
// checked as a header rule's (origin.CheckRuleValue). The errors name the
// key and never a value.
func interceptEdits(cfg *config.Config, key string, r *config.InterceptRule) (*origin.Edits, error) {
	var ec origin.EditConfig
	set := func(table string, m map[string]string) ([]origin.HeaderField, error) {
		var fs []origin.HeaderField
		for _, n := range slices.Sorted(maps.Keys(m)) {
			k := key + "." + table + ".set." + n
			val, err := config.ExpandFileRefs(m[n], func(path string) (string, error) { return readHeaderFile(cfg, k, path) })
			if err != nil {
				return nil, err
			}
			if err := origin.CheckRuleValue(val); err != nil {
				return nil, cfg.KeyError(k, fmt.Errorf("the value read: %w", err))
			}
			fs = append(fs, origin.HeaderField{Name: n, Value: val})
		}
		return fs, nil
	}
	var err error
	if ec.RequestSet, err = set("request_headers", r.RequestHeaders.Set); err != nil {
		return nil, err
	}
	if ec.ResponseSet, err = set("response_headers", r.ResponseHeaders.Set); err != nil {
		return nil, err
	}
	ec.RequestRemove, ec.ResponseRemove = r.RequestHeaders.Remove, r.ResponseHeaders.Remove
	e, err := origin.NewEdits(ec)
	if err != nil {
		return nil, cfg.KeyError(key, err)
	}
	return e, nil
}

// interceptor returns the gate.Interceptor of a listener whose policy is
// p: a front-end per rule (the HTTP/1.1 proxy and the HTTP/2 server,
// with the rule's origin client), nil without interception.
func (b *builder) interceptor(p *gate.Policy, pc httpproxy.Config) (gate.Interceptor, error) {
	ic := b.g.Intercept
	if ic == nil {
		return nil, nil
	}
	fronts := make([]intercept.Frontend, len(b.icOrigins))
	for i, oc := range b.icOrigins {
		rpc := pc
		rpc.Origin = oc
		rpc.UpstreamIdle = b.cfg.Intercept.UpstreamIdle.Duration
		var err error
		if fronts[i].HTTP1, err = httpproxy.New(rpc); err != nil {
			return nil, err
		}
		if fronts[i].H2, err = newH2(b.cfg, rpc); err != nil {
			return nil, err
		}
	}
	return ic.Listener(fronts, p.Metrics)
}
