package wire

import (
	"fmt"
	"log/slog"
	"slices"

	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/h2"
	"github.com/rustle-proxy/rustle/internal/h3"
	"github.com/rustle-proxy/rustle/internal/httpproxy"
	"github.com/rustle-proxy/rustle/internal/masque"
	"github.com/rustle-proxy/rustle/internal/origin"
	"github.com/rustle-proxy/rustle/internal/pac"
	"github.com/rustle-proxy/rustle/internal/sni"
	"github.com/rustle-proxy/rustle/internal/socks5"
	"github.com/rustle-proxy/rustle/internal/tlsconf"
	"github.com/rustle-proxy/rustle/internal/transparent"
)

// dialer makes the listeners' dialer: the connect timeout, the socket
// buffers, the guard and the resolver.
func (b *builder) dialer() error {
	dc := dialer.Config{
		Timeout:           b.cfg.Timeouts.Connect.Duration,
		SocketBufferBytes: b.cfg.SocketBufferBytes,
		Guard:             b.g.Guard,
		Mark:              b.cfg.Egress.MarkValue(),
	}
	if b.g.Resolver != nil {
		dc.Resolver = b.g.Resolver
	}
	d, err := dialer.New(dc)
	if err != nil {
		return fmt.Errorf("wire: %w", err)
	}
	b.g.Dialer = d
	return nil
}

// listeners makes each configured listener's policy and front-ends,
// taking the TLS managers of the previous generation's listeners with
// the same TLS settings.
func (b *builder) listeners() error {
	reuse := make(map[tlsKey][]*tlsconf.Manager)
	if b.prev != nil {
		for _, l := range b.prev.Listeners {
			if l.TLS != nil {
				k := tlsKeyOf(l.Config)
				reuse[k] = append(reuse[k], l.TLS)
			}
		}
	}
	for i := range b.cfg.Listen {
		l, err := b.listener(i, reuse)
		if err != nil {
			return err
		}
		b.g.Listeners = append(b.g.Listeners, l)
	}
	return nil
}

// listener makes the policy and the front-ends of cfg.Listen[i].
func (b *builder) listener(i int, reuse map[tlsKey][]*tlsconf.Manager) (*Listener, error) {
	cfg, lc := b.cfg, b.cfg.Listen[i]
	log := b.log.With("listener", lc.Name)
	policy, err := b.policy(i, log)
	if err != nil {
		return nil, err
	}
	pc := proxyConfig(cfg, b.oc, log)
	if slices.Contains(cfg.PAC.Listeners, lc.Name) {
		pc.PAC = b.pacFile
	}
	l := &Listener{Config: lc, Policy: policy, ReadHeader: cfg.Timeouts.ReadHeader.Duration,
		ClientHello: cfg.Timeouts.ClientHello.Duration, QUICRetry: cfg.HTTP3.RetryThreshold}
	if l.Proxy, err = httpproxy.New(pc); err != nil {
		return nil, fmt.Errorf("wire: listener %s: %w", lc.Name, err)
	}
	if policy.Intercept, err = b.interceptor(policy, pc); err != nil {
		return nil, fmt.Errorf("wire: listener %s: intercept: %w", lc.Name, err)
	}
	for _, e := range lc.ProxyProtocolFrom {
		p, err := acl.ParsePrefix(e)
		if err != nil {
			return nil, fmt.Errorf("wire: listener %s: proxy_protocol_from: %w", lc.Name, err)
		}
		l.ProxyFrom = append(l.ProxyFrom, p)
	}
	switch lc.Protocol {
	case "socks5", "mixed":
		l.SOCKS = newSOCKS(cfg, log)
	case "https":
		if err := b.https(l, pc, reuse); err != nil {
			return nil, fmt.Errorf("wire: listener %s: %w", lc.Name, err)
		}
	case config.ProtocolTransparent:
		if l.Transparent, err = transparent.New(transparent.Config{Proxy: l.Proxy, TProxy: lc.Mode == config.ModeTProxy,
			FirstBytes: cfg.Timeouts.ClientHello.Duration, WriteTimeout: cfg.Timeouts.Write.Duration, Logger: log}); err != nil {
			return nil, fmt.Errorf("wire: listener %s: %w", lc.Name, err)
		}
	}
	return l, nil
}

// policy makes the gate.Policy of cfg.Listen[i]: the generation's
// rules, limiter, dialer and routes, the listener's egress and its
// authenticator, and what every generation shares.
func (b *builder) policy(i int, log *slog.Logger) (*gate.Policy, error) {
	cfg, lc, env := b.cfg, b.cfg.Listen[i], b.env
	p := &gate.Policy{
		Listener:   lc.Name,
		ACL:        b.listenerRules(i),
		Limiter:    b.g.Limiter,
		Dialer:     b.g.Dialer,
		Pool:       env.Pool,
		Routes:     b.g.Routes,
		Metrics:    env.Metrics.Listener(lc.Name, lc.Protocol),
		AccessLog:  env.AccessLog,
		TunnelIdle: cfg.Timeouts.IdleTunnel.Duration,
		Logger:     log,
		Revoked:    env.Revoked,
		Cut:        env.Cut,
		Quota:      env.Quota,
		Instance:   env.Instance,
		Authz:      b.g.Authz,

		HelloTimeout: cfg.Timeouts.ClientHello.Duration,
	}
	var err error
	if p.SNI, err = sni.ParseMode(lc.SNI); err != nil {
		return nil, fmt.Errorf("wire: listener %s: sni: %w", lc.Name, err)
	}
	if env.Metrics != nil {
		p.UserMetrics = env.Metrics.User
	}
	if p.Egress, err = listenerEgress(cfg, i, b.egressT); err != nil {
		return nil, err
	}
	if cfg.EffectiveAuth(lc) == config.AuthBasic {
		if p.Auth, err = listenerAuth(cfg, i, b.g.Auth, b.byName, b.chains); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// https makes the TLS manager of an "https" listener, or takes one of
// reuse with its settings and re-reads its certificate, and its HTTP/2
// and HTTP/3 servers.
func (b *builder) https(l *Listener, pc httpproxy.Config, reuse map[tlsKey][]*tlsconf.Manager) error {
	lc := l.Config
	if k := tlsKeyOf(lc); len(reuse[k]) > 0 {
		ms := reuse[k]
		l.TLS, reuse[k] = ms[0], ms[1:]
		if err := l.TLS.Reload(); err != nil {
			return err
		}
	} else {
		m, err := newTLS(lc, pc.Logger)
		if err != nil {
			return err
		}
		l.TLS = m
		b.g.created = append(b.g.created, m)
	}
	alpn := lc.EffectiveALPN()
	l.HTTP1 = slices.Contains(alpn, config.ALPNHTTP1)
	var err error
	if slices.Contains(alpn, config.ALPNH2) {
		if l.H2, err = newH2(b.cfg, pc); err != nil {
			return err
		}
	}
	if lc.HTTP3 {
		if l.H3, err = newH3(b.cfg, pc); err != nil {
			return err
		}
	}
	return nil
}

// origin makes the origin client every listener's front-ends share: how
// forwarded requests go upstream, with the header rules.
func (b *builder) origin() error {
	cfg := b.cfg
	headers, err := b.compileHeaderRules()
	if err != nil {
		return err
	}
	oc, err := origin.New(origin.Config{
		Forwarded:             cfg.Forwarded,
		Via:                   cfg.Via,
		MaxHeaderBytes:        cfg.MaxHeaderBytes,
		ResponseHeaderTimeout: cfg.Timeouts.ResponseHeader.Duration,
		WriteTimeout:          cfg.Timeouts.Write.Duration,
		Headers:               headers,
	})
	if err != nil {
		return fmt.Errorf("wire: %w", err)
	}
	b.oc = oc
	return nil
}

// proxyConfig returns the HTTP/1.1 proxy's settings, whose origin client
// and timeouts the HTTP/2 and HTTP/3 servers share.
func proxyConfig(cfg *config.Config, oc *origin.Client, log *slog.Logger) httpproxy.Config {
	return httpproxy.Config{
		Origin:            oc,
		ReadHeaderTimeout: cfg.Timeouts.ReadHeader.Duration,
		IdleTimeout:       cfg.Timeouts.IdleClient.Duration,
		SocketBufferBytes: cfg.SocketBufferBytes,
		Logger:            log,
	}
}

// newSOCKS returns the SOCKS server of a "socks5" or "mixed" listener:
// its wire settings (what it may do is its sessions' policy).
func newSOCKS(cfg *config.Config, log *slog.Logger) *socks5.Server {
	return socks5.New(socks5.Config{
		HandshakeTimeout:  cfg.Timeouts.ReadHeader.Duration,
		UDPIdleTimeout:    cfg.Timeouts.UDPIdle.Duration,
		SocketBufferBytes: cfg.SocketBufferBytes,
		Logger:            log,
	})
}

// newTLS loads the certificate of an "https" listener.
func newTLS(lc config.Listener, log *slog.Logger) (*tlsconf.Manager, error) {
	return tlsconf.New(tlsconf.Config{
		Cert:       lc.TLS.Cert,
		Key:        lc.TLS.Key,
		ClientCA:   lc.TLS.ClientCA,
		KTLS:       lc.TLS.KTLS,
		NextProtos: slices.Clone(lc.EffectiveALPN()),
		// KeyExchanges: nil (the key left out) keeps Go's default.
		KeyExchanges: lc.KeyExchangeIDs(),
		Logger:       log,
	})
}

// newH2 returns the HTTP/2 server of an "https" listener: its wire
// settings, with the origin client and timeouts of the listener's
// HTTP/1.1 proxy (what it may do is its sessions' policy).
func newH2(cfg *config.Config, pc httpproxy.Config) (*h2.Server, error) {
	tmpl, err := masque.ParseTemplate(cfg.HTTP3.UDPTemplate)
	if err != nil {
		return nil, fmt.Errorf("http3.udp_template: %w", err)
	}
	return h2.New(h2.Config{
		Origin:               pc.Origin,
		MaxConcurrentStreams: uint32(cfg.HTTP2.MaxConcurrentStreams),
		MaxHeaderListSize:    uint32(cfg.HTTP2.MaxHeaderListSize),
		InitialStreamWindow:  uint32(cfg.HTTP2.InitialStreamWindow),
		InitialConnWindow:    uint32(cfg.HTTP2.InitialConnWindow),
		MaxFrameSize:         uint32(cfg.HTTP2.MaxFrameSize),
		HandshakeTimeout:     pc.ReadHeaderTimeout,
		IdleTimeout:          pc.IdleTimeout,
		WriteTimeout:         cfg.Timeouts.Write.Duration,
		TunnelIdleTimeout:    cfg.Timeouts.IdleTunnel.Duration,
		UDPTemplate:          tmpl,
		UDPIdleTimeout:       cfg.Timeouts.UDPIdle.Duration,
		Logger:               pc.Logger,
	})
}

// newH3 returns the HTTP/3 server of an https listener with http3 on: the
// [http3] bounds, the CONNECT-UDP template, and the origin client and
// idle timeout of the listener's HTTP/1.1 proxy.
func newH3(cfg *config.Config, pc httpproxy.Config) (*h3.Server, error) {
	tmpl, err := masque.ParseTemplate(cfg.HTTP3.UDPTemplate)
	if err != nil {
		return nil, fmt.Errorf("http3.udp_template: %w", err)
	}
	return h3.New(h3.Config{
		Origin:           pc.Origin,
		Template:         tmpl,
		HandshakeTimeout: cfg.Timeouts.QUICHandshake.Duration,
		IdleTimeout:      pc.IdleTimeout,
		UDPIdleTimeout:   cfg.Timeouts.UDPIdle.Duration,
		MaxConns:         cfg.HTTP3.MaxConnections,
		MaxStreams:       cfg.HTTP3.MaxStreams,
		MaxFlows:         cfg.HTTP3.MaxFlows,
		MaxListenerFlows: cfg.HTTP3.MaxListenerFlows,
		Logger:           pc.Logger,
	})
}

// pac makes the PAC file of [pac], which the listeners it names serve:
// the operator's file, read and checked (the error names its line), or
// a generated one.
func (b *builder) pac() error {
	if !b.cfg.PAC.Set() {
		return nil
	}
	p, err := pac.New(b.cfg.PAC)
	if err != nil {
		return b.cfg.KeyError("pac.file", err)
	}
	b.pacFile = p
	return nil
}
