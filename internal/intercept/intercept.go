package intercept

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"reflect"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/h2"
	"github.com/rustle-proxy/rustle/internal/httpproxy"
	"github.com/rustle-proxy/rustle/internal/metrics"
	"github.com/rustle-proxy/rustle/internal/origin"
	"github.com/rustle-proxy/rustle/internal/tunnel"
)

// Rule is one interception rule: the tunnels it names, and how the
// requests inside them are edited.
type Rule struct {
	// Name names the rule in logs and errors.
	Name string
	// Match is the rule's criteria, with the syntax and meaning of an
	// access rule's (Name, Action, AllowPrivate and SNI empty); Methods
	// and Paths must be empty (a tunnel has neither).
	Match acl.Rule
	// Edits are the header fields set on and removed from the requests
	// inside and their responses; nil = none. They go to the rule's
	// origin client (see Frontend).
	Edits *origin.Edits
}

// Config is the interception of a configuration: its CA's leaves, its
// rules and its bypass list.
type Config struct {
	// Certs mints the leaves; required.
	Certs *Certs
	// Rules are tried in order; the first that names a tunnel
	// intercepts it. Empty = nothing is intercepted.
	Rules []Rule
	// Groups and ProviderGroups are the groups the rules' groups
	// criteria may name (as the access rules').
	Groups         map[string][]string
	ProviderGroups []string
	// Bypass are hosts entries ("bank.example", "*.bank.example",
	// ".bank.example", IP addresses and CIDR prefixes) whose tunnels are
	// spliced whatever the rules say: matched against the tunnel's host
	// and, for names, against its ClientHello's server name. nil = none.
	Bypass []string
	// HandshakeTimeout bounds the TLS handshake with the client, from
	// its ClientHello on; 0 = no limit.
	HandshakeTimeout time.Duration
	// Logger receives the refused certificates (info) and failed
	// handshakes (debug); nil = discard.
	Logger *slog.Logger
}

// Interceptor is a compiled Config, which the listeners of a
// configuration share (see Listener). It is immutable and safe for
// concurrent use.
type Interceptor struct {
	cfg        Config
	rules      *acl.Matcher
	bypassHost *acl.Matcher  // the bypass entries as hosts; nil = none
	bypassSNI  *acl.SNINames // the bypass names as server names; nil = none
	log        *slog.Logger
}

// New compiles cfg. It fails on a criterion that does not parse, a
// rule with methods or paths, or a bypass entry that is not a hosts
// entry; the errors name the rule or entry.
func New(cfg Config) (*Interceptor, error) {
	if cfg.Certs == nil {
		return nil, errors.New("intercept: Certs must be set")
	}
	var errs []error
	crit := make([]acl.Rule, len(cfg.Rules))
	for i, r := range cfg.Rules {
		if len(r.Match.Methods) > 0 || len(r.Match.Paths) > 0 {
			errs = append(errs, fmt.Errorf("intercept: rule %s: methods and paths are not tunnels' criteria (the access rules decide the requests inside)", r.Name))
		}
		crit[i] = r.Match
		crit[i].Name = r.Name
	}
	m, err := acl.NewMatcher(crit, cfg.Groups, cfg.ProviderGroups)
	if err != nil {
		errs = append(errs, fmt.Errorf("intercept: %w", err))
	}
	ic := &Interceptor{cfg: cfg, rules: m, log: cfg.Logger}
	if ic.log == nil {
		ic.log = slog.New(slog.DiscardHandler)
	}
	if len(cfg.Bypass) > 0 {
		var names []string
		for _, e := range cfg.Bypass {
			if acl.ParseSNIHost(e) == nil {
				names = append(names, e)
			}
		}
		if ic.bypassHost, err = acl.NewMatcher([]acl.Rule{{Name: "bypass", Hosts: cfg.Bypass}}, nil, nil); err != nil {
			errs = append(errs, fmt.Errorf("intercept: %w", err))
		}
		if ic.bypassSNI, err = acl.NewSNINames(names); err != nil {
			errs = append(errs, fmt.Errorf("intercept: bypass: %w", err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return ic, nil
}

// Certs returns the interceptor's leaves.
func (ic *Interceptor) Certs() *Certs { return ic.cfg.Certs }

// Frontend is what serves the requests inside the tunnels one rule
// intercepts on one listener: the HTTP/1.1 proxy and the HTTP/2 server,
// made with an origin client that speaks TLS to origins
// (origin.Config.TLS) and carries the rule's Edits.
type Frontend struct {
	// HTTP1 serves the connections that speak HTTP/1.1; required.
	HTTP1 *httpproxy.Proxy
	// H2 serves those that chose h2; nil = h2 is not offered.
	H2 *h2.Server
}

// Listener returns the gate.Interceptor of a listener: fronts are the
// rules' front-ends, in the rules' order; m counts the interceptions.
func (ic *Interceptor) Listener(fronts []Frontend, m *metrics.ListenerMetrics) (gate.Interceptor, error) {
	if len(fronts) != len(ic.cfg.Rules) {
		return nil, fmt.Errorf("intercept: %d front-ends for %d rules", len(fronts), len(ic.cfg.Rules))
	}
	l := &listener{ic: ic, fronts: fronts, m: m}
	for i, f := range fronts {
		if f.HTTP1 == nil {
			return nil, fmt.Errorf("intercept: rule %s: no HTTP/1.1 front-end", ic.cfg.Rules[i].Name)
		}
	}
	l.tls = make([]*tls.Config, len(fronts))
	for i, f := range fronts {
		alpn := []string{"http/1.1"}
		if f.H2 != nil {
			alpn = []string{"h2", "http/1.1"}
		}
		// One configuration per rule, shared by its connections: the
		// session tickets it issues resume on any of them.
		l.tls[i] = &tls.Config{
			MinVersion:     tls.VersionTLS12,
			NextProtos:     alpn,
			GetCertificate: l.certificate,
		}
	}
	return l, nil
}

// listener is an Interceptor bound to one listener's front-ends and
// metrics.
type listener struct {
	ic     *Interceptor
	fronts []Frontend
	tls    []*tls.Config
	m      *metrics.ListenerMetrics
}

// Considers reports whether a rule could name the tunnel r once its
// hello is read, and no bypass entry names its host (one that does is
// counted as bypassed when a rule names the tunnel).
func (l *listener) Considers(r *acl.Request) bool {
	i, pending := l.ic.rules.MatchHello(*r)
	if i < 0 && !pending {
		return false
	}
	if l.bypassHost(r) {
		if i >= 0 {
			l.m.Intercepted(metrics.InterceptBypassed)
		}
		return false
	}
	return true
}

// Intercepts returns the first rule that names the tunnel r, its hello
// read; -1 when none does, or when a bypass entry names its host or
// server name (counted as bypassed).
func (l *listener) Intercepts(r *acl.Request) int {
	i := l.ic.rules.Match(*r)
	if i < 0 {
		return -1
	}
	if l.bypassHost(r) || r.SNI != "" && l.ic.bypassSNI != nil && l.ic.bypassSNI.Match(r.SNI) {
		l.m.Intercepted(metrics.InterceptBypassed)
		return -1
	}
	return i
}

// bypassHost reports whether a bypass entry names the tunnel's host.
func (l *listener) bypassHost(r *acl.Request) bool {
	if l.ic.bypassHost == nil {
		return false
	}
	q := acl.Request{Host: r.Host, Addr: r.Addr, Port: r.Port, Protocol: r.Protocol}
	return l.ic.bypassHost.Match(q) >= 0
}

// clientConn is the client's side of an intercepted tunnel as the TLS
// server reads it: the bytes read before (its ClientHello) first, then
// the connection's; and the name its certificate is minted for.
type clientConn struct {
	net.Conn
	first []byte
	name  string
	certs *Certs
	// sent says the certificate was chosen (the client's hello read, the
	// server's flight on its way): a failure after it is the client's
	// verdict on the certificate.
	sent atomic.Bool
}

// NetConn returns the connection read, for tunnel.RecordParker: it
// holds no bytes of its own once first has been read.
func (c *clientConn) NetConn() net.Conn { return c.Conn }

func (c *clientConn) Read(p []byte) (int, error) {
	if len(c.first) > 0 {
		n := copy(p, c.first)
		c.first = c.first[n:]
		if len(c.first) == 0 {
			c.first = nil
		}
		return n, nil
	}
	return c.Conn.Read(p)
}

// certificate returns the leaf of the connection's name.
func (l *listener) certificate(hi *tls.ClientHelloInfo) (*tls.Certificate, error) {
	c, ok := hi.Conn.(*clientConn)
	if !ok {
		return nil, errors.New("intercept: not an intercepted connection")
	}
	cert, err := c.certs.Get(c.name)
	if err == nil {
		c.sent.Store(true)
	}
	return cert, err
}

// Serve intercepts the tunnel in: the TLS handshake with the client,
// with a leaf minted for in.Name, then its requests served by the
// rule's front-ends, under a session of their own. With then set, the
// connection goes on without the calling goroutine once served by the
// front-end's continuation (httpproxy.Proxy.ServeConnReadThen,
// h2.Server.ServeConnThen), which wait for an idle client with no
// goroutine.
func (l *listener) Serve(g *gate.Grant, in *gate.Intercepted, c net.Conn, first []byte, then func()) bool {
	ic := l.ic
	rule := in.RuleIndex
	in.Rule = ic.cfg.Rules[rule].Name
	cc := &clientConn{Conn: c, first: first, name: in.Name, certs: ic.cfg.Certs}
	// crypto/tls reads no further than the record it reads, the hello
	// read too: an idle connection's front-end can then wait for the
	// client's next request on the socket (tunnel.RecordParker). So
	// too when the tunnel came by a CONNECT on the https port: its TLS
	// runs inside the client's TLS to the proxy, c, whose plaintext is
	// read a record at a time, and its front-end waits on c's socket.
	var rc net.Conn
	switch c := c.(type) {
	case *net.TCPConn:
		rc = tunnel.RecordConnRead(c, first)
	case *tls.Conn:
		rc = tunnel.RecordConnTLS(c, first)
	}
	if rc != nil {
		cc.Conn, cc.first = rc, nil
	}
	tc := tls.Server(cc, l.tls[rule])
	if t := ic.cfg.HandshakeTimeout; t > 0 {
		c.SetDeadline(time.Now().Add(t))
	}
	err := handshake(g.Session().Context(), tc)
	c.SetDeadline(time.Time{})
	if err != nil {
		l.refused(g, in, cc, err)
		return false
	}
	l.m.Intercepted(metrics.InterceptServed)
	sess := g.InterceptSession(in)
	f := l.fronts[rule]
	h2 := tc.ConnectionState().NegotiatedProtocol == "h2" && f.H2 != nil
	if then == nil {
		if h2 {
			f.H2.ServeConn(tc, sess)
		} else {
			f.HTTP1.ServeConn(tc, sess)
		}
		sess.Close()
		return false
	}
	ended := func() {
		sess.Close()
		then()
	}
	if h2 {
		f.H2.ServeConnThen(tc, sess, ended)
		return true
	}
	if f.HTTP1.ServeConnReadThen(tc, sess, nil, ended) {
		return true
	}
	sess.Close()
	return false
}

// refused notes a handshake with the client that failed: the client
// refusing the minted certificate (a certificate alert, or a close once
// it had it) is client-rejected-certificate, logged at info level,
// anything else tls-handshake at debug level.
func (l *listener) refused(g *gate.Grant, in *gate.Intercepted, cc *clientConn, err error) {
	attrs := []slog.Attr{slog.String("client", g.Session().Client().String()), slog.String("user", g.User),
		slog.String("target", string(g.AppendDest(nil))), slog.String("name", in.Name), slog.String("rule", in.Rule),
		slog.Any("err", err)}
	if rejected(err, cc.sent.Load()) {
		l.m.Intercepted(metrics.InterceptClientRejected)
		g.SetReason(accesslog.ReasonClientRejectedCert)
		l.ic.log.LogAttrs(context.Background(), slog.LevelInfo,
			"intercept: the client refused the certificate minted for its tunnel (it does not trust the CA, or pins the origin's key; list the host in intercept.bypass to splice it)",
			attrs...)
		return
	}
	l.m.Intercepted(metrics.InterceptHandshakeFailed)
	g.SetReason(accesslog.ReasonTLSHandshake)
	l.ic.log.LogAttrs(context.Background(), slog.LevelDebug, "intercept: the TLS handshake with the client failed", attrs...)
}

// Certificate alerts a client sends when it refuses a server's
// certificate (RFC 8446 §6.2).
var certAlerts = map[uint8]bool{
	42: true, // bad_certificate
	43: true, // unsupported_certificate
	44: true, // certificate_revoked
	45: true, // certificate_expired
	46: true, // certificate_unknown
	48: true, // unknown_ca
}

// alertBadRecordMAC is the bad_record_mac alert (RFC 8446 §6.2).
const alertBadRecordMAC = 20

// rejected reports whether err, a failed server handshake, is the
// client's refusal of the certificate: an alert about it; or, once the
// certificate was on its way (sent), the connection closed or reset, as
// clients that send no alert do, or a record rustle cannot decrypt, as
// OpenSSL's alert is (curl, Python: the alert refusing the certificate
// comes in the clear while rustle reads with the handshake's keys).
func rejected(err error, sent bool) bool {
	var oe *net.OpError
	if errors.As(err, &oe) && (oe.Op == "remote error" || oe.Op == "local error") {
		code := -1
		if v := reflect.ValueOf(oe.Err); v.Kind() == reflect.Uint8 {
			code = int(v.Uint())
		}
		if oe.Op == "local error" {
			return sent && code == alertBadRecordMAC
		}
		if code >= 0 {
			return certAlerts[uint8(code)]
		}
		return strings.Contains(oe.Err.Error(), "certificate")
	}
	return sent && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET))
}

// handshake runs tc's handshake on a goroutine of its own: its
// cryptography grows a stack to tens of KiB, which leaves with the
// short-lived goroutine rather than staying with the connection's.
func handshake(ctx context.Context, tc *tls.Conn) error {
	errc := make(chan error, 1)
	go func() { errc <- tc.HandshakeContext(ctx) }()
	return <-errc
}
