package route

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Scheme is a parent's protocol.
type Scheme uint8

// The parent protocols.
const (
	// HTTP is a plain HTTP proxy: CONNECT for tunnels, absolute-form
	// requests for plain HTTP ("http").
	HTTP Scheme = iota + 1
	// HTTPS is an HTTP proxy reached over TLS ("https").
	HTTPS
	// SOCKS5 is a SOCKS5 proxy given the address rustle resolved and
	// checked ("socks5").
	SOCKS5
	// SOCKS5H is a SOCKS5 proxy given the host name, which it resolves
	// ("socks5h").
	SOCKS5H
)

// String returns the URL scheme of s.
func (s Scheme) String() string {
	switch s {
	case HTTP:
		return "http"
	case HTTPS:
		return "https"
	case SOCKS5:
		return "socks5"
	case SOCKS5H:
		return "socks5h"
	}
	return ""
}

// IsHTTP reports whether s speaks HTTP (http or https): the parent can
// take plain HTTP requests in absolute form.
func (s Scheme) IsHTTP() bool { return s == HTTP || s == HTTPS }

// ParentConfig configures one parent.
type ParentConfig struct {
	// Name names the parent in routes, logs and metrics; required.
	Name string
	// URL is scheme://[user:pass@]host:port with the scheme http, https,
	// socks5 or socks5h; the port is required. user and pass are
	// percent-decoded.
	URL string
	// CAFile is a PEM file of the CAs that sign an https parent's
	// certificate; "" = the system's roots.
	CAFile string
	// ServerName is the name sent in SNI and verified in an https
	// parent's certificate; "" = the URL's host.
	ServerName string
	// ConnectTimeout bounds connecting to the parent and its handshake
	// together; required.
	ConnectTimeout time.Duration
	// IdleTimeout is how long an idle keep-alive connection to the parent
	// is kept for reuse; 0 = the upstream pool's own idle timeout.
	IdleTimeout time.Duration
	// Health configures the passive health check; required.
	Health HealthConfig
	// Probe configures the active health check; the zero value probes
	// nothing.
	Probe ProbeConfig
}

// Dialer connects to a parent's own address; *dialer.Dialer implements
// it. The address is the operator's and is not checked by the
// private-destination guard.
type Dialer interface {
	DialTrusted(ctx context.Context, addr string) (*net.TCPConn, error)
}

// Parent is one configured parent proxy. It is immutable but for its
// Health, and safe for concurrent use.
type Parent struct {
	name    string
	scheme  Scheme
	addr    string // host:port
	user    string
	pass    string
	auth    string // "Basic …", the Proxy-Authorization value; "" = none
	tls     *tls.Config
	timeout time.Duration
	idle    time.Duration
	probe   ProbeConfig
	health  Health
	obs     Observer     // nil = none; set by Table.Observe before use
	cfg     ParentConfig // as configured, to carry the parent over a reload

	// The probe loop, shared by the tables that hold the parent (a
	// reload's new table takes it over from the old one).
	probeMu     sync.Mutex
	probeRefs   int                // the started tables holding the parent; guarded by probeMu
	probeDialer Dialer             // what the loop dials with, the latest table's; guarded by probeMu
	probeStop   context.CancelFunc // stops the loop; guarded by probeMu
	probeDone   chan struct{}      // closed when the loop returns; guarded by probeMu
}

// NewParent parses and checks cfg: the URL, the CA file of an https
// parent, the timeouts and the health check's settings. The error names
// what is wrong, never the password.
func NewParent(cfg ParentConfig) (*Parent, error) {
	if cfg.Name == "" {
		return nil, errors.New("route: parent without a name")
	}
	p := &Parent{name: cfg.Name, timeout: cfg.ConnectTimeout, idle: cfg.IdleTimeout, probe: cfg.Probe, cfg: cfg}
	if cfg.ConnectTimeout <= 0 {
		return nil, fmt.Errorf("route: parent %s: connect timeout %v is not positive", cfg.Name, cfg.ConnectTimeout)
	}
	if cfg.IdleTimeout < 0 {
		return nil, fmt.Errorf("route: parent %s: negative timeout", cfg.Name)
	}
	if err := cfg.Health.check(); err != nil {
		return nil, fmt.Errorf("route: parent %s: %w", cfg.Name, err)
	}
	u, err := parseURL(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("route: parent %s: %w", cfg.Name, err)
	}
	p.scheme, p.addr = u.scheme, u.addr
	host := u.host
	if u.hasUser {
		p.user, p.pass = u.user, u.pass
		if p.scheme.IsHTTP() {
			p.auth = "Basic " + base64.StdEncoding.EncodeToString([]byte(p.user+":"+p.pass))
		}
	}
	if (cfg.CAFile != "" || cfg.ServerName != "") && p.scheme != HTTPS {
		return nil, fmt.Errorf("route: parent %s: ca_file and server_name are for https parents", cfg.Name)
	}
	if p.scheme == HTTPS {
		tc := &tls.Config{ServerName: cfg.ServerName, MinVersion: tls.VersionTLS12}
		if tc.ServerName == "" {
			tc.ServerName = host
		}
		if cfg.CAFile != "" {
			pem, err := os.ReadFile(cfg.CAFile)
			if err != nil {
				return nil, fmt.Errorf("route: parent %s: read ca_file: %w", cfg.Name, err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("route: parent %s: ca_file %s holds no PEM certificate", cfg.Name, cfg.CAFile)
			}
			tc.RootCAs = pool
		}
		p.tls = tc
	}
	if err := cfg.Probe.check(); err != nil {
		return nil, fmt.Errorf("route: parent %s: %w", cfg.Name, err)
	}
	if h, _, _ := splitTarget(cfg.Probe.Target); p.scheme == SOCKS5 && h != "" {
		if _, err := parseAddr(h); err != nil {
			return nil, fmt.Errorf("route: parent %s: probe target of a socks5 parent is an IP address (rustle resolves for it)", cfg.Name)
		}
	}
	p.health.init(cfg.Health)
	return p, nil
}

// ParseURL checks a parent URL, scheme://[user:pass@]host:port with the
// scheme http, https, socks5 or socks5h, and returns its scheme and
// host:port. The error never repeats the password.
func ParseURL(raw string) (Scheme, string, error) {
	u, err := parseURL(raw)
	if err != nil {
		return 0, "", fmt.Errorf("route: %w", err)
	}
	return u.scheme, u.addr, nil
}

// parsedURL is a parent URL taken apart.
type parsedURL struct {
	scheme     Scheme
	host, addr string
	hasUser    bool
	user, pass string
}

func parseURL(raw string) (parsedURL, error) {
	var r parsedURL
	u, err := url.Parse(raw)
	if err != nil {
		// url's error quotes the URL, password and all.
		return r, errors.New("url is not a URL")
	}
	switch u.Scheme {
	case "http":
		r.scheme = HTTP
	case "https":
		r.scheme = HTTPS
	case "socks5":
		r.scheme = SOCKS5
	case "socks5h":
		r.scheme = SOCKS5H
	default:
		return r, fmt.Errorf("scheme %q is not http, https, socks5 or socks5h", u.Scheme)
	}
	if u.Opaque != "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return r, fmt.Errorf("url has a path, query or fragment; want %s://[user:pass@]host:port", u.Scheme)
	}
	r.host = u.Hostname()
	port := u.Port()
	if r.host == "" || port == "" {
		return r, errors.New("url needs a host and a port")
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return r, fmt.Errorf("port %q is not 1-65535", port)
	}
	r.addr = net.JoinHostPort(r.host, port)
	if u.User != nil {
		r.hasUser = true
		r.user = u.User.Username()
		r.pass, _ = u.User.Password()
		if r.scheme.IsHTTP() && strings.Contains(r.user, ":") {
			return r, errors.New("user name has ':'")
		}
		if !r.scheme.IsHTTP() && (len(r.user) == 0 || len(r.user) > 255 || len(r.pass) > 255) {
			return r, errors.New("a SOCKS5 user name is 1-255 bytes and its password at most 255")
		}
	}
	return r, nil
}

// Name returns the parent's configured name; "" for a nil Parent
// (direct).
func (p *Parent) Name() string {
	if p == nil {
		return ""
	}
	return p.name
}

// Scheme returns the parent's protocol.
func (p *Parent) Scheme() Scheme { return p.scheme }

// Addr returns the parent's address, host:port.
func (p *Parent) Addr() string { return p.addr }

// Authorization returns the Proxy-Authorization value rustle sends an
// HTTP parent ("Basic …"), "" when it has no credentials. It is a
// secret: never log it.
func (p *Parent) Authorization() string { return p.auth }

// IdleTimeout returns how long an idle connection to the parent is kept;
// 0 = the pool's own setting.
func (p *Parent) IdleTimeout() time.Duration { return p.idle }

// ConnectTimeout returns the bound on connecting to the parent and its
// handshake.
func (p *Parent) ConnectTimeout() time.Duration { return p.timeout }

// Health returns the parent's health.
func (p *Parent) Health() *Health { return &p.health }

// ResolvesLocally reports whether rustle resolves the destination and
// gives the parent the address (socks5); otherwise the parent is given
// the name and resolves it.
func (p *Parent) ResolvesLocally() bool { return p.scheme == SOCKS5 }

// Target is the destination a parent is asked to connect to.
type Target struct {
	// Host is the destination's host name or IP literal (no brackets);
	// sent to every parent but a socks5 one.
	Host string
	// Addr is the address rustle resolved and checked, required for a
	// socks5 parent (see [Parent.ResolvesLocally]) and sent in place of
	// Host; ignored by the others, unless Host is "".
	Addr netip.Addr
	// Port is the destination port.
	Port uint16
	// Via is the value of the Via fields the request for the tunnel
	// arrived with (its elements, comma-separated), which a CONNECT to an
	// HTTP parent carries in front of Self's element (see
	// Instance.ViaElement), so that a loop through several proxies comes
	// back naming each; "" = none.
	Via string
	// Self is the rustle asking (see Instance); nil = the process's
	// default instance.
	Self *Instance
	// Header is field lines, each "Name: value\r\n", that a CONNECT to
	// an HTTP parent carries after rustle's own (the route's, see
	// Route.ConnectHeader); "" = none. Other parents ignore it.
	Header string
}

// Dial connects to the parent and asks it for a tunnel to t. The result
// carries the destination's bytes: a *net.TCPConn for an http, socks5 or
// socks5h parent (the splice engine can relay it), a *tls.Conn for an
// https one. Nothing the destination sent after the parent's answer is
// lost: the answer is read exactly. Every wait ends at the parent's
// connect timeout, or earlier with ctx. The parent's health learns the
// outcome. Errors are *Error.
func (p *Parent) Dial(ctx context.Context, d Dialer, t Target) (net.Conn, error) {
	t0 := time.Now()
	c, err := p.dial(ctx, d, t.Self, func(c net.Conn) error { return p.handshake(c, t) })
	p.observe(t0, err)
	return c, err
}

// observe tells the health and the observer how a dial that began at t0
// ended.
func (p *Parent) observe(t0 time.Time, err error) {
	now := time.Now()
	p.health.observe(err, now)
	if p.obs != nil {
		p.obs.Dialed(now.Sub(t0), err == nil)
	}
}

// DialParent connects to the parent without a handshake (and through TLS
// for an https parent), for plain HTTP requests sent to an HTTP parent in
// absolute form. The health learns the outcome. Errors are *Error.
func (p *Parent) DialParent(ctx context.Context, d Dialer) (net.Conn, error) {
	t0 := time.Now()
	c, err := p.dial(ctx, d, nil, nil)
	p.observe(t0, err)
	return c, err
}

// dial connects to the parent's address, makes TLS for https and runs
// handshake (nil = none) under one deadline. While the handshake runs,
// the connection is one of self's (see Returning).
func (p *Parent) dial(ctx context.Context, d Dialer, self *Instance, handshake func(net.Conn) error) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	tc, err := d.DialTrusted(ctx, p.addr)
	if err != nil {
		return nil, p.wrap(err)
	}
	dl, _ := ctx.Deadline()
	tc.SetDeadline(dl)
	// A cancelled ctx ends a handshake wait at once.
	stop := context.AfterFunc(ctx, func() { tc.SetDeadline(time.Unix(1, 0)) })
	var c net.Conn = tc
	if handshake != nil {
		// While the parent is asked, a connection from this one's local
		// address that rustle accepts has come back (see Returning).
		defer noteHandshake(self, tc)()
	}
	if p.scheme == HTTPS {
		tlc := tls.Client(tc, p.tls)
		if err = tlc.HandshakeContext(ctx); err != nil {
			err = fmt.Errorf("TLS handshake: %w", err)
		}
		c = tlc
	}
	if err == nil && handshake != nil {
		err = handshake(c)
	}
	if !stop() || err != nil {
		c.Close()
		if err == nil {
			err = ctx.Err()
		}
		return nil, p.wrap(err)
	}
	tc.SetDeadline(time.Time{})
	return c, nil
}

// wrap makes err an *Error, a timeout TimedOut and a broken connection
// Unreachable.
func (p *Parent) wrap(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	kind := Unreachable
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded) {
		kind = TimedOut
	}
	return &Error{Parent: p.name, Kind: kind, Err: err}
}

func (p *Parent) handshake(c net.Conn, t Target) error {
	if p.scheme.IsHTTP() {
		return p.connectHTTP(c, t)
	}
	return p.connectSOCKS5(c, t)
}

// hostOf returns the host a parent is asked for: the name, or for a
// socks5 parent (or without a name) the address.
func (p *Parent) hostOf(t Target) (string, error) {
	if p.scheme == SOCKS5 || t.Host == "" {
		if !t.Addr.IsValid() {
			return "", fmt.Errorf("route: parent %s: no resolved address for %s", p.name, t.Host)
		}
		return t.Addr.Unmap().String(), nil
	}
	return t.Host, nil
}
