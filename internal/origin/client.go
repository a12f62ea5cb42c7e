package origin

import (
	"crypto/tls"
	"fmt"
	"sync"
	"time"

	"golang.org/x/net/http2"
)

// Config is how the front-ends of a listener talk to upstreams.
type Config struct {
	// Forwarded is ForwardedNone, ForwardedRFC or ForwardedXFF: the field
	// a forwarded request carries the client's address in. New rejects
	// any other value, "" included.
	Forwarded string
	// Via adds rustle's Via element to forwarded messages. false = none.
	// A request sent to a parent carries the policy's instance in Via
	// instead, whatever Via says (see route.Instance).
	Via bool
	// MaxHeaderBytes bounds a request head a front-end reads and a
	// response head an exchange reads; New rejects a value that is not
	// positive (the configuration always sets it).
	MaxHeaderBytes int
	// ResponseHeaderTimeout bounds the wait for a response head once the
	// request is complete upstream; 0 = no limit (the configuration always
	// sets one).
	ResponseHeaderTimeout time.Duration
	// WriteTimeout bounds each blocked write to an upstream and each wait
	// for bytes of a body; 0 = no limit (the configuration always sets
	// one).
	WriteTimeout time.Duration
	// TLS, when not nil, is the TLS configuration of every upstream:
	// the Client of the requests inside intercepted tunnels (see package
	// intercept), whose origins speak HTTPS. Each exchange dials through
	// its grant (directly, or tunnelled through its route's parent, never
	// forwarded to an http parent in absolute form) and verifies the
	// origin's certificate with it for the tunnel's name (its ServerName
	// is set per connection, see gate.Intercepted); a handshake that
	// fails is a TLSError, answered 502 with the reason. Its NextProtos
	// are replaced per connection: h2 and http/1.1 are offered, and an
	// origin that picks h2 is spoken HTTP/2 to (see h2Conn); a WebSocket
	// handshake, and an origin that asked for HTTP/1.1 lately (see
	// ErrHTTP11Required), are offered http/1.1 alone. nil = plain HTTP.
	TLS *tls.Config
	// TLSHandshakeTimeout bounds the TLS handshake with an origin; 0 =
	// no limit.
	TLSHandshakeTimeout time.Duration
	// Edits are the header fields set on and removed from the requests
	// forwarded and the responses relayed (an interception rule's
	// request_headers and response_headers); nil = none.
	Edits *Edits
	// Headers are the header rules that edit forwarded requests and their
	// responses (see NewHeaderRules); nil = none.
	Headers *HeaderRules
}

// Client is a validated Config, which the front-ends of a listener share
// and every [Exchange] of theirs reads. It is immutable, but for what it
// makes once and keeps (the HTTP/2 transport, the TLS configurations),
// and safe for concurrent use.
type Client struct {
	cfg Config

	h2Once sync.Once
	h2     *http2.Transport // the HTTP/2 connections' configuration (see h2Transport)

	tlsMu   sync.Mutex
	tlsCfgs map[tlsKey]*tls.Config // the TLS configurations of the handshakes with origins (see tlsConfig)

	h1 h1Origins // the origins that asked for HTTP/1.1 lately (see ErrHTTP11Required)
}

// New returns the Client of cfg. It fills no defaults (the configuration
// has resolved every value): it returns an error naming the field when
// MaxHeaderBytes is not positive or Forwarded is not one of the three
// modes.
func New(cfg Config) (*Client, error) {
	if cfg.MaxHeaderBytes <= 0 {
		return nil, fmt.Errorf("origin: MaxHeaderBytes must be positive, got %d", cfg.MaxHeaderBytes)
	}
	switch cfg.Forwarded {
	case ForwardedNone, ForwardedRFC, ForwardedXFF:
	default:
		return nil, fmt.Errorf("origin: Forwarded must be %q, %q or %q, got %q",
			ForwardedNone, ForwardedRFC, ForwardedXFF, cfg.Forwarded)
	}
	return &Client{cfg: cfg}, nil
}

// Config returns c's configuration, which the caller must not modify.
func (c *Client) Config() *Config { return &c.cfg }
