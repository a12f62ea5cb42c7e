package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/textproto"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rustle-proxy/rustle/internal/rawio"
)

// dialer opens connections to one target, through a proxy or straight.
type dialer struct {
	// proxy is the proxy's host:port; "" connects straight to target.
	proxy string
	// socks makes dial speak SOCKS5 (RFC 1928) to the proxy instead of
	// HTTP CONNECT.
	socks bool
	// h2 makes dial open an HTTP/2 connection (TLS with ALPN "h2") per
	// tunnel and a CONNECT stream on it (RFC 9113 §8.5); without a proxy,
	// a POST stream to the origin's HTTP/2 sink.
	h2 bool
	// user and pass are the credentials: Basic for HTTP, RFC 1929
	// username/password for SOCKS5; "" sends none.
	user, pass string
	// authHeader is the Proxy-Authorization value; "" sends none.
	authHeader string
	// tlsConf, when not nil, wraps the connection to the proxy (or, with
	// no proxy, to the target) in TLS.
	tlsConf *tls.Config
	target  string
	timeout time.Duration
	// handshakes and resumed count the TLS handshakes done and those that
	// resumed a session; shared by every copy of the dialer.
	handshakes, resumed *atomic.Int64
	// seen tallies the key exchange and certificate of every handshake.
	seen *tlsSeen
	// inner, when not nil, is the client's TLS to the target inside a
	// CONNECT tunnel (-https through a proxy): the requests are https://
	// requests the proxy splices or intercepts.
	inner *tls.Config
	// altHost, when not "", names the target by this host instead of its
	// own on every other connection dialHTTP opens (the CONNECT line and
	// the TLS server name; -alt-host); conns counts those connections.
	altHost string
	conns   *atomic.Int64
}

func newDialer(proxy, userPass, target string, timeout time.Duration) dialer {
	d := dialer{proxy: proxy, target: target, timeout: timeout, handshakes: new(atomic.Int64), resumed: new(atomic.Int64), seen: new(tlsSeen), conns: new(atomic.Int64)}
	if userPass != "" {
		d.user, d.pass, _ = strings.Cut(userPass, ":")
		d.authHeader = "Basic " + base64.StdEncoding.EncodeToString([]byte(userPass))
	}
	return d
}

// dialFlags are the flags every subcommand shares to reach its target.
type dialFlags struct {
	proxy, auth *string
	tls         *bool
	ca          *string
	resume      *bool
	socks       *bool
	h2          *bool
	curves      *string
	https       *bool
	altHost     *string
}

func addDialFlags(fs *flag.FlagSet) *dialFlags {
	return &dialFlags{
		proxy:   fs.String("proxy", "", "proxy `host:port`; empty connects straight to the target"),
		auth:    fs.String("auth", "", "`user:pass` for the proxy (Basic, or SOCKS5 username/password); empty sends none"),
		tls:     fs.Bool("tls", false, "speak TLS to the proxy (an HTTPS proxy), or to the target when there is no proxy"),
		ca:      fs.String("ca", "", "PEM `file` of the CA that signed the TLS server's certificate (with -tls)"),
		resume:  fs.Bool("resume", false, "with -tls, keep a TLS session cache so new connections resume a session; without it every connection makes a full handshake"),
		socks:   fs.Bool("socks5", false, "speak SOCKS5 to the proxy instead of HTTP CONNECT (bulk and hold)"),
		h2:      fs.Bool("h2", false, "with -tls, speak HTTP/2 (ALPN h2): a connection per tunnel with one CONNECT stream (bulk and hold; without a proxy a POST stream to the origin's HTTP/2 sink); implied by the h2 subcommand"),
		https:   fs.Bool("https", false, "send the requests over TLS to the target (https://, trusting -ca): through a proxy inside a CONNECT tunnel on its plain port, which splices or intercepts it; without one, TLS straight to the target (http and hold)"),
		altHost: fs.String("alt-host", "", "with -https, name the target by this `host` (same port) on every other new connection: in the CONNECT line, the TLS server name and Host"),
		curves:  fs.String("curves", "", "with -tls, the key exchanges the client offers, comma-separated as Go names them (X25519, X25519MLKEM768, CurveP256, ...); empty offers Go's defaults (X25519MLKEM768 first)"),
	}
}

// parseCurves returns the key exchanges named in list (Go's names, as
// tls.CurveID prints them), nil for an empty list.
func parseCurves(list string) ([]tls.CurveID, error) {
	if strings.TrimSpace(list) == "" {
		return nil, nil
	}
	known := []tls.CurveID{tls.X25519, tls.X25519MLKEM768, tls.CurveP256, tls.CurveP384, tls.CurveP521, tls.SecP256r1MLKEM768, tls.SecP384r1MLKEM1024}
	var out []tls.CurveID
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		i := slices.IndexFunc(known, func(c tls.CurveID) bool { return c.String() == name })
		if i < 0 {
			return nil, fmt.Errorf("unknown key exchange %q (known: %v)", name, known)
		}
		out = append(out, known[i])
	}
	return out, nil
}

// dialer builds the dialer the flags describe for target.
func (f *dialFlags) dialer(target string, timeout time.Duration) (d dialer, err error) {
	d = newDialer(*f.proxy, *f.auth, target, timeout)
	d.socks, d.h2 = *f.socks, *f.h2
	if *f.altHost != "" && !*f.https {
		return d, errors.New("-alt-host needs -https")
	}
	d.altHost = *f.altHost
	if *f.https && d.proxy != "" {
		if *f.tls || d.socks || d.h2 {
			return d, errors.New("-https through a proxy goes through its plain port: not with -tls, -socks5 or -h2")
		}
		d.inner = &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}
		if d.inner.RootCAs, err = readRoots(*f.ca); err != nil {
			return d, err
		}
		if *f.resume {
			d.inner.ClientSessionCache = tls.NewLRUClientSessionCache(64)
		}
		return d, nil
	}
	if !*f.tls && !*f.https {
		switch {
		case d.h2:
			return d, errors.New("-h2 needs -tls")
		case *f.curves != "":
			return d, errors.New("-curves needs -tls")
		}
		return d, nil
	}
	conf := &tls.Config{MinVersion: tls.VersionTLS12}
	if conf.CurvePreferences, err = parseCurves(*f.curves); err != nil {
		return d, err
	}
	if conf.RootCAs, err = readRoots(*f.ca); err != nil {
		return d, err
	}
	server := target
	if d.proxy != "" {
		server = d.proxy
	}
	host, _, err := net.SplitHostPort(server)
	if err != nil {
		return d, fmt.Errorf("TLS server name of %q: %w", server, err)
	}
	conf.ServerName = host
	if *f.resume {
		conf.ClientSessionCache = tls.NewLRUClientSessionCache(64)
	}
	if d.h2 {
		conf.NextProtos = []string{"h2"}
	}
	d.tlsConf = conf
	return d, nil
}

// readRoots returns the certificates of the PEM file path as a pool;
// nil (the system roots) for "".
func readRoots(path string) (*x509.CertPool, error) {
	if path == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("read CA %s: no certificate in it", path)
	}
	return pool, nil
}

// authority returns the target as the next connection names it: the
// target, or on every other connection with -alt-host, altHost with the
// target's port.
func (d dialer) authority() string {
	if d.altHost == "" || d.conns.Add(1)%2 == 1 {
		return d.target
	}
	_, port, _ := net.SplitHostPort(d.target)
	return net.JoinHostPort(d.altHost, port)
}

// dialHTTP opens a connection for requests and returns it with the
// authority it names: dialConn's connection, or with -https through a
// proxy a CONNECT tunnel to the target with the client's TLS to the
// target inside it (its handshake counted like the proxy's).
func (d dialer) dialHTTP(ctx context.Context) (net.Conn, string, error) {
	auth := d.authority()
	d.target = auth
	if d.inner == nil {
		c, err := d.dialConn(ctx)
		return c, auth, err
	}
	t, err := d.dial(ctx)
	if err != nil {
		return nil, auth, err
	}
	host, _, _ := net.SplitHostPort(auth)
	conf := d.inner.Clone()
	conf.ServerName = host
	tc := tls.Client(t, conf)
	hctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	if err := tc.HandshakeContext(hctx); err != nil {
		t.Close()
		return nil, auth, fmt.Errorf("TLS handshake with %s through %s: %w", auth, d.proxy, err)
	}
	d.handshakes.Add(1)
	cs := tc.ConnectionState()
	if cs.DidResume {
		d.resumed.Add(1)
	}
	d.seen.record(&cs)
	return tc, auth, nil
}

// firstHop returns the address connections are opened to: the proxy, or
// the target without a proxy.
func (d dialer) firstHop() string {
	if d.proxy != "" {
		return d.proxy
	}
	return d.target
}

// getURL returns the URL of a GET for path on the target: a forwarded
// request (:scheme http, :authority the origin) through a proxy, an https
// one straight to the origin.
func (d dialer) getURL(path string) string {
	if d.proxy != "" {
		return "http://" + d.target + path
	}
	return "https://" + d.target + path
}

// dialConn opens the connection to the proxy (or to the target without a
// proxy), with its TLS handshake done when the dialer speaks TLS.
func (d dialer) dialConn(ctx context.Context) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	var nd net.Dialer
	addr := d.firstHop()
	c, err := nd.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	c = rawio.Wrap(c)
	if d.tlsConf == nil {
		return c, nil
	}
	tc := tls.Client(c, d.tlsConf)
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("TLS handshake with %s: %w", addr, err)
	}
	d.handshakes.Add(1)
	cs := tc.ConnectionState()
	if cs.DidResume {
		d.resumed.Add(1)
	}
	d.seen.record(&cs)
	return tc, nil
}

// tunnelConn is an established tunnel. Reads drain what the reader of the
// proxy's answer buffered first.
type tunnelConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *tunnelConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// errStatus is returned when the proxy answers CONNECT with a status other
// than 200.
var errStatus = errors.New("load: CONNECT refused")

// errSOCKS is returned when a SOCKS5 proxy refuses the authentication or
// the request.
var errSOCKS = errors.New("load: SOCKS5 refused")

// dial opens one tunnel: a connection to the proxy (TLS when asked), then
// CONNECT and a 200 answer or a SOCKS5 CONNECT and a success reply; or a
// plain connection to the target without a proxy. With h2 the tunnel is
// an HTTP/2 stream on a connection of its own.
func (d dialer) dial(ctx context.Context) (*tunnelConn, error) {
	if d.h2 {
		s, err := d.dialH2Stream(ctx)
		if err != nil {
			return nil, err
		}
		return &tunnelConn{Conn: s, r: bufio.NewReaderSize(s, 512)}, nil
	}
	c, err := d.dialConn(ctx)
	if err != nil {
		return nil, err
	}
	tc := &tunnelConn{Conn: c, r: bufio.NewReaderSize(c, 512)}
	if d.proxy == "" {
		return tc, nil
	}
	c.SetDeadline(time.Now().Add(d.timeout))
	if d.socks {
		err = d.socksConnect(tc)
	} else {
		err = d.httpConnect(tc)
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	c.SetDeadline(time.Time{})
	return tc, nil
}

// httpConnect sends CONNECT on tc and reads a 200 answer.
func (d dialer) httpConnect(tc *tunnelConn) error {
	req := "CONNECT " + d.target + " HTTP/1.1\r\nHost: " + d.target + "\r\n"
	if d.authHeader != "" {
		req += "Proxy-Authorization: " + d.authHeader + "\r\n"
	}
	req += "\r\n"
	if _, err := io.WriteString(tc.Conn, req); err != nil {
		return fmt.Errorf("send CONNECT %s to %s: %w", d.target, d.proxy, err)
	}
	tp := textproto.NewReader(tc.r)
	status, err := tp.ReadLine()
	if err != nil {
		return fmt.Errorf("read CONNECT answer from %s: %w", d.proxy, err)
	}
	if _, err := tp.ReadMIMEHeader(); err != nil {
		return fmt.Errorf("read CONNECT answer headers from %s: %w", d.proxy, err)
	}
	f := strings.Fields(status)
	if len(f) < 2 || f[1] != "200" {
		return fmt.Errorf("%w: %q", errStatus, status)
	}
	return nil
}

// socksConnect runs a SOCKS5 CONNECT to the target on tc: method
// negotiation (username/password when the dialer has credentials, "no
// authentication" otherwise), RFC 1929 authentication, the request and its
// reply.
func (d dialer) socksConnect(tc *tunnelConn) error {
	_, err := d.socksRequest(tc, 1, d.target)
	return err
}

// socksRequest runs the SOCKS5 exchange of socksConnect on tc with the
// command cmd (1 CONNECT, 3 UDP ASSOCIATE) for target, and returns the
// reply's bound address (for UDP ASSOCIATE, the relay's).
func (d dialer) socksRequest(tc *tunnelConn, cmd byte, target string) (netip.AddrPort, error) {
	var bound netip.AddrPort
	host, portText, err := net.SplitHostPort(target)
	if err != nil {
		return bound, fmt.Errorf("SOCKS5 target %q: %w", target, err)
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil {
		return bound, fmt.Errorf("SOCKS5 target %q: bad port", target)
	}
	method := byte(0x00)
	if d.user != "" {
		method = 0x02
	}
	// One message at a time, each after the answer to the one before, as
	// curl does.
	var b [4]byte
	if _, err := tc.Conn.Write([]byte{5, 1, method}); err != nil {
		return bound, fmt.Errorf("send SOCKS5 greeting to %s: %w", d.proxy, err)
	}
	if _, err := io.ReadFull(tc.r, b[:2]); err != nil {
		return bound, fmt.Errorf("read SOCKS5 method from %s: %w", d.proxy, err)
	}
	if b[0] != 5 || b[1] != method {
		return bound, fmt.Errorf("%w: method answer % x, want 05 %02x", errSOCKS, b[:2], method)
	}
	if method == 0x02 {
		if len(d.user) > 255 || len(d.pass) > 255 {
			return bound, errors.New("load: SOCKS5 user or password longer than 255 bytes")
		}
		msg := append([]byte{1, byte(len(d.user))}, d.user...)
		msg = append(msg, byte(len(d.pass)))
		msg = append(msg, d.pass...)
		if _, err := tc.Conn.Write(msg); err != nil {
			return bound, fmt.Errorf("send SOCKS5 authentication to %s: %w", d.proxy, err)
		}
		if _, err := io.ReadFull(tc.r, b[:2]); err != nil {
			return bound, fmt.Errorf("read SOCKS5 authentication answer from %s: %w", d.proxy, err)
		}
		if b[1] != 0 {
			return bound, fmt.Errorf("%w: authentication status %d", errSOCKS, b[1])
		}
	}
	msg := []byte{5, cmd, 0}
	if ip, err := netip.ParseAddr(host); err == nil && ip.Is4() {
		a := ip.As4()
		msg = append(msg, 1)
		msg = append(msg, a[:]...)
	} else if err == nil {
		a := ip.As16()
		msg = append(msg, 4)
		msg = append(msg, a[:]...)
	} else {
		msg = append(msg, 3, byte(len(host)))
		msg = append(msg, host...)
	}
	msg = binary.BigEndian.AppendUint16(msg, uint16(port))
	if _, err := tc.Conn.Write(msg); err != nil {
		return bound, fmt.Errorf("send SOCKS5 command %d for %s to %s: %w", cmd, target, d.proxy, err)
	}
	if _, err := io.ReadFull(tc.r, b[:4]); err != nil {
		return bound, fmt.Errorf("read SOCKS5 reply from %s: %w", d.proxy, err)
	}
	if b[0] != 5 || b[1] != 0 {
		return bound, fmt.Errorf("%w: reply % x", errSOCKS, b[:2])
	}
	var skip int
	switch b[3] {
	case 1:
		skip = 4 + 2
	case 4:
		skip = 16 + 2
	case 3:
		n, err := tc.r.ReadByte()
		if err != nil {
			return bound, fmt.Errorf("read SOCKS5 reply from %s: %w", d.proxy, err)
		}
		skip = int(n) + 2
	default:
		return bound, fmt.Errorf("%w: reply address type %d", errSOCKS, b[3])
	}
	a := make([]byte, skip)
	if _, err := io.ReadFull(tc.r, a); err != nil {
		return bound, fmt.Errorf("read SOCKS5 reply from %s: %w", d.proxy, err)
	}
	if b[3] != 3 {
		ip, _ := netip.AddrFromSlice(a[:skip-2])
		bound = netip.AddrPortFrom(ip, binary.BigEndian.Uint16(a[skip-2:]))
	}
	return bound, nil
}
