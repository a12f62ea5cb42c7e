package origin

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"strings"
	"time"
)

// TLSError is a TLS handshake with an origin that failed: its
// certificate did not verify for Name, or the handshake itself failed
// (no protocol in common, the origin closed). Failure answers it 502
// with the reason origin-tls.
type TLSError struct {
	// Name is the name the certificate was verified for.
	Name string
	// Err is the handshake's error.
	Err error
}

func (e *TLSError) Error() string { return "origin: TLS with " + e.Name + ": " + e.Err.Error() }
func (e *TLSError) Unwrap() error { return e.Err }

// Why says, in one client-safe line, what went wrong: what was wrong
// with the certificate, or the handshake's error.
func (e *TLSError) Why() string {
	var ua x509.UnknownAuthorityError
	var ci x509.CertificateInvalidError
	var he x509.HostnameError
	switch {
	case errors.As(e.Err, &ua):
		return "its certificate is signed by an authority rustle does not trust (self-signed, or not in the system roots or intercept.upstream_ca)"
	case errors.As(e.Err, &ci) && ci.Reason == x509.Expired:
		return "its certificate has expired or is not yet valid"
	case errors.As(e.Err, &ci):
		return "its certificate is not valid: " + ci.Error()
	case errors.As(e.Err, &he):
		return "its certificate is not valid for " + e.Name
	}
	var ne net.Error
	if errors.As(e.Err, &ne) && ne.Timeout() {
		return "the TLS handshake timed out"
	}
	msg := e.Err.Error()
	if strings.Contains(msg, "no application protocol") {
		return "it accepts neither h2 nor http/1.1 by ALPN (a WebSocket handshake offers http/1.1 alone: an origin that speaks only h2 cannot take one)"
	}
	return "the TLS handshake failed: " + msg
}

// handshakeTLS makes c, a connection to an origin, a TLS one for name
// with the Client's TLS configuration, within TLSHandshakeTimeout and
// while ctx lives: the TLS connection when the origin chose http/1.1 or
// nothing, an h2Conn over it when it chose h2. On failure it closes c
// and returns a *TLSError.
func (x *Exchange) handshakeTLS(ctx context.Context, c net.Conn, name string) (net.Conn, error) {
	tc := tls.Client(c, x.c.tlsConfig(name, x.h1Only()))
	if t := x.c.cfg.TLSHandshakeTimeout; t > 0 {
		c.SetDeadline(time.Now().Add(t))
	}
	err := handshake(ctx, tc)
	c.SetDeadline(time.Time{})
	if err != nil {
		c.Close()
		return nil, &TLSError{Name: name, Err: err}
	}
	if tc.ConnectionState().NegotiatedProtocol == "h2" {
		h, err := newH2Conn(x.c.h2Transport(), tc, name)
		if err != nil {
			return nil, err
		}
		return h, nil
	}
	return tc, nil
}

// tlsKey names a TLS configuration of the handshakes with origins: the
// server name, and whether http/1.1 alone is offered.
type tlsKey struct {
	name string
	h1   bool
}

// maxTLSConfigs bounds the TLS configurations a Client keeps (see
// tlsConfig): past it, they are all dropped and made again as needed.
const maxTLSConfigs = 1024

// tlsConfig returns the TLS configuration of a handshake with the origin
// name: the Client's, for name, offering h2 and http/1.1, or http/1.1
// alone when h1 is set (a WebSocket handshake is HTTP/1.1's: RFC 8441 is
// not spoken upstream). It is made once per name and shared by the
// connections to it: a tls.Conn keeps its configuration for as long as
// it lives, and a copy each would cost an idle connection, kept for its
// client's next request or pooled, 0.5 KiB.
func (c *Client) tlsConfig(name string, h1 bool) *tls.Config {
	k := tlsKey{name, h1}
	c.tlsMu.Lock()
	defer c.tlsMu.Unlock()
	if cfg := c.tlsCfgs[k]; cfg != nil {
		return cfg
	}
	if c.tlsCfgs == nil || len(c.tlsCfgs) >= maxTLSConfigs {
		c.tlsCfgs = make(map[tlsKey]*tls.Config)
	}
	cfg := c.cfg.TLS.Clone()
	cfg.ServerName = name
	cfg.NextProtos = alpnH2
	if h1 {
		cfg.NextProtos = alpnH1
	}
	c.tlsCfgs[k] = cfg
	return cfg
}

// The protocols offered to origins: h2 and http/1.1 (the origin
// chooses), http/1.1 alone for a WebSocket handshake.
var (
	alpnH2 = []string{"h2", "http/1.1"}
	alpnH1 = []string{"http/1.1"}
)

// handshake runs tc's handshake on a goroutine of its own: its
// cryptography grows a stack to tens of KiB, which then leaves with the
// short-lived goroutine instead of staying with the caller's.
func handshake(ctx context.Context, tc *tls.Conn) error {
	errc := make(chan error, 1)
	go func() { errc <- tc.HandshakeContext(ctx) }()
	return <-errc
}
