package wire

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/resolve"
	"github.com/rustle-proxy/rustle/internal/route"
)

// resolver makes the [dns] resolver, none when cfg has none (the
// system's), or takes the previous generation's when its [dns] is the
// same, so that a reload keeps the cache.
func (b *builder) resolver() error {
	d := &b.cfg.DNS
	if !d.Enabled() {
		return nil
	}
	if p := b.prev; p != nil && p.Resolver != nil && p.Config.DNS.Equal(d) {
		b.g.Resolver = p.Resolver
		return nil
	}
	r, err := b.buildResolver("dns.resolvers", d.Resolvers)
	b.g.Resolver = r
	return err
}

// buildResolver makes a resolver asking servers (the configuration's key
// names them in errors) with [dns]'s other settings.
func (b *builder) buildResolver(key string, servers []string) (*resolve.Resolver, error) {
	cfg := b.cfg
	d := &cfg.DNS
	rc := resolve.Config{
		Timeout:     d.Timeout.Duration,
		MinTTL:      d.MinTTL.Duration,
		MaxTTL:      d.MaxTTL.Duration,
		NegativeTTL: d.NegativeTTL.Duration,
		CacheSize:   d.CacheSize,
		Hosts:       d.HostAddrs(),
		Mark:        cfg.Egress.MarkValue(),
	}
	labels := make([]string, len(servers))
	for i, u := range servers {
		srv, err := resolve.ParseServer(u)
		if err != nil {
			return nil, cfg.KeyError(fmt.Sprintf("%s[%d]", key, i), err)
		}
		rc.Servers = append(rc.Servers, srv)
		labels[i] = srv.Label
	}
	var err error
	if rc.Prefer, err = resolve.ParseFamily(d.Prefer); err != nil {
		return nil, cfg.KeyError("dns.prefer", err)
	}
	if rc.Only, err = resolve.ParseFamily(d.Only); err != nil {
		return nil, cfg.KeyError("dns.only", err)
	}
	if d.CA != "" {
		pem, err := os.ReadFile(d.CA)
		if err != nil {
			return nil, cfg.KeyError("dns.ca", err)
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return nil, cfg.KeyError("dns.ca", fmt.Errorf("%s holds no PEM certificate", d.CA))
		}
		rc.TLS = &tls.Config{RootCAs: roots}
	}
	rc.Metrics = b.env.Metrics.DNS(labels)
	rc.Logger = b.log
	return resolve.New(rc)
}

// egress builds the global egress source and the users' rules.
func (b *builder) egress() error {
	t, err := newEgress(b.cfg)
	b.egressT = t
	return err
}

// egressTable is what [egress] and the users' rules build: the global
// source and the users' sources.
type egressTable struct {
	global *dialer.Source    // nil = the kernel's choice
	rules  []gate.EgressRule // the users' sources, in order; nil = none
}

// newEgress builds the global egress source and the users' rules,
// checking that their addresses are the host's (unless freebind) and
// that their interfaces exist.
func newEgress(cfg *config.Config) (egressTable, error) {
	var t egressTable
	e := &cfg.Egress
	if e.Set() {
		src, err := newSource(cfg, "egress", dialer.SourceConfig{Bind: e.Bind, Interface: e.Interface, Freebind: e.Freebind})
		if err != nil {
			return t, err
		}
		t.global = src
	}
	for i, r := range e.Rules {
		key := fmt.Sprintf("egress.rules[%d]", i)
		src, err := newSource(cfg, key, dialer.SourceConfig{Bind: r.Bind, Interface: r.Interface, Freebind: r.Freebind})
		if err != nil {
			return t, err
		}
		names, err := acl.NewSNINames(r.SNIHosts)
		if err != nil {
			return t, fmt.Errorf("wire: %s.sni_hosts: %w", key, err)
		}
		t.rules = append(t.rules, gate.EgressRule{Who: cfg.Selector(r.Who, true), Source: src, SNI: names})
	}
	return t, nil
}

// listenerEgress returns the egress of cfg.Listen[i]: its own source
// when it sets one, else the global; the users' rules in both cases. nil
// when there is nothing to choose.
func listenerEgress(cfg *config.Config, i int, t egressTable) (*gate.Egress, error) {
	le := cfg.Listen[i].Egress
	def := t.global
	if le.Set() {
		src, err := newSource(cfg, fmt.Sprintf("listen[%d].egress", i),
			dialer.SourceConfig{Bind: le.Bind, BindSame: le.BindSame, Interface: le.Interface, Freebind: le.Freebind})
		if err != nil {
			return nil, err
		}
		def = src
	}
	if def == nil && t.rules == nil {
		return nil, nil
	}
	return &gate.Egress{Default: def, Rules: t.rules}, nil
}

// newSource makes the source of the egress table at key, refusing an
// address the host does not have (without freebind) and an interface it
// does not have, naming the key and its line.
func newSource(cfg *config.Config, key string, sc dialer.SourceConfig) (*dialer.Source, error) {
	src, err := dialer.NewSource(sc)
	if err != nil {
		var be *dialer.BindError
		if errors.As(err, &be) {
			return nil, cfg.KeyError(fmt.Sprintf("%s.bind[%d]", key, be.Index), be.Err)
		}
		k := key
		switch {
		case sc.BindSame:
			k = key + ".bind_same"
		case sc.Interface != "":
			k = key + ".interface"
		case sc.Freebind:
			k = key + ".freebind"
		}
		return nil, cfg.KeyError(k, err)
	}
	i, err := src.Missing(sc.Bind)
	if err != nil {
		return nil, cfg.KeyError(key+".bind", err)
	}
	if i >= 0 {
		return nil, cfg.KeyError(fmt.Sprintf("%s.bind[%d]", key, i),
			fmt.Errorf("%s is not an address of this host: configure it on an interface, or set freebind = true", sc.Bind[i]))
	}
	if sc.Interface != "" {
		if err := hasInterface(sc.Interface); err != nil {
			return nil, cfg.KeyError(key+".interface", err)
		}
	}
	return src, nil
}

// maxInterfacesNamed bounds the interfaces an error about a missing one
// lists (a container host may have hundreds of veths).
const maxInterfacesNamed = 16

// hasInterface reports, in rustle's words, a network interface name the
// host does not have, listing those it has: `"eht0" is not a network
// interface of this host (it has lo, eth0)`.
func hasInterface(name string) error {
	ifs, err := net.Interfaces()
	if err != nil {
		return fmt.Errorf("list the host's network interfaces to find %q: %w", name, err)
	}
	names := make([]string, 0, min(len(ifs), maxInterfacesNamed+1))
	for _, ifc := range ifs {
		if ifc.Name == name {
			return nil
		}
		if len(names) < maxInterfacesNamed {
			names = append(names, ifc.Name)
		}
	}
	if len(ifs) > maxInterfacesNamed {
		names = append(names, fmt.Sprintf("and %d more", len(ifs)-maxInterfacesNamed))
	}
	return fmt.Errorf("%q is not a network interface of this host (it has %s)", name, strings.Join(names, ", "))
}

// routes compiles the parents and routes, carrying over the previous
// generation's parents of the same name and URL with their health.
func (b *builder) routes() error {
	var prev *route.Table
	if b.prev != nil {
		prev = b.prev.Routes
	}
	t, err := b.newRoutes(prev)
	b.g.Routes = t
	return err
}

// newRoutes compiles the configuration's parents and routes, with the
// routes' own egress sources and resolvers; nil when there are neither.
// The parents of prev (the table in use; nil at start) with the same name
// and URL are carried over with their health (see route.NewAfter). Its
// metrics series (observeRoutes, called once the build is sure to be
// used, before any connection uses it) and probes start when the
// generation is put to use, so that a build that is dropped leaves no
// series behind.
func (b *builder) newRoutes(prev *route.Table) (*route.Table, error) {
	cfg := b.cfg
	if len(cfg.Parents) == 0 && len(cfg.Routes) == 0 {
		return nil, nil
	}
	rc := cfg.RouteConfig()
	for i, r := range cfg.Routes {
		key := fmt.Sprintf("routes[%d]", i)
		if err := b.withLists(key, r.Criteria, &rc.Routes[i].Match); err != nil {
			return nil, err
		}
		if i < len(b.routeHeaders) {
			rc.Routes[i].ConnectHeader = string(b.routeHeaders[i].Request.AppendFields(nil))
		}
		if e := r.Egress; e.Set() {
			src, err := newSource(cfg, key+".egress", dialer.SourceConfig{Bind: e.Bind, Interface: e.Interface, Freebind: e.Freebind})
			if err != nil {
				return nil, err
			}
			rc.Routes[i].Source = src
		}
		if len(r.Resolvers) > 0 {
			res, err := b.buildResolver(key+".resolvers", r.Resolvers)
			if err != nil {
				return nil, err
			}
			rc.Routes[i].Resolver = res
		}
	}
	t, err := route.NewAfter(rc, prev)
	if err != nil {
		return nil, fmt.Errorf("wire: %w", err)
	}
	return t, nil
}
