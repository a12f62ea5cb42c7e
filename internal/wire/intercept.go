package wire

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"runtime"
	"strings"

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
	upstream := &tls.Config{RootCAs: roots, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12,
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
// {file:} references read now (see readSecretFile). The errors name the
// key and never a value.
func interceptEdits(cfg *config.Config, key string, r *config.InterceptRule) (*origin.Edits, error) {
	var ec origin.EditConfig
	set := func(table string, m map[string]string) ([]origin.EditField, error) {
		var fs []origin.EditField
		for n, v := range m {
			val, err := config.ExpandFileRefs(v, readSecretFile)
			if err != nil {
				return nil, cfg.KeyError(key+"."+table+".set."+n, err)
			}
			if err := origin.CheckEditValue(val); err != nil {
				return nil, cfg.KeyError(key+"."+table+".set."+n, fmt.Errorf("the value read: %w", err))
			}
			fs = append(fs, origin.EditField{Name: n, Value: val})
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

// maxSecretFile bounds a file a {file:} reference reads.
const maxSecretFile = origin.MaxEditValue

// readSecretFile returns the content of a file a header value names, a
// trailing line break dropped: a secret, which no error quotes. A file
// others may read or write (on Unix) is refused, as is an empty one.
func readSecretFile(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if runtime.GOOS != "windows" && fi.Mode().Perm()&0o007 != 0 {
		return "", fmt.Errorf("%s has mode %#o: others may not have any permission on it (chmod o-rwx)", path, fi.Mode().Perm())
	}
	if fi.Size() > maxSecretFile {
		return "", fmt.Errorf("%s is larger than %d bytes", path, maxSecretFile)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	s := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if s == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return s, nil
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
