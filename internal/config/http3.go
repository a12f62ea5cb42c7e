package config

import (
	"errors"
	"fmt"

	"github.com/rustle-proxy/rustle/internal/masque"
)

// HTTP3 configures HTTP/3 on the https listeners whose http3 key is true
// (see [Listener.HTTP3]): the bounds on QUIC connections, request streams
// and CONNECT-UDP flows, and the CONNECT-UDP URI template. Each bound
// applies to each such listener on its own.
type HTTP3 struct {
	// MaxConnections bounds the QUIC connections a listener serves at
	// once (besides limits.max_connections, which counts them with the
	// TCP ones); past it a new connection is closed with
	// H3_EXCESSIVE_LOAD. 0 means no bound of its own.
	MaxConnections int `toml:"max_connections"`
	// MaxStreams is the number of request streams a QUIC connection may
	// have open at once (its stream credit); 0 means 100.
	MaxStreams int `toml:"max_streams"`
	// MaxFlows bounds the CONNECT-UDP flows of one QUIC connection; a
	// request past it is answered 503. 0 means 64.
	MaxFlows int `toml:"max_flows"`
	// MaxListenerFlows bounds the CONNECT-UDP flows of all of a
	// listener's connections together; a request past it is answered
	// 503. 0 means 10000.
	MaxListenerFlows int `toml:"max_listener_flows"`
	// RetryThreshold is the QUIC handshakes in progress on a listener
	// from client addresses not yet validated past which a new
	// connection from an unvalidated address is first sent a Retry
	// (address validation, RFC 9000 §8.1.2); one address gets an eighth
	// of it (at least one) before its own connections are. 0 means a
	// quarter of limits.max_tls_handshakes (64), and -1 a Retry for every
	// connection from an unvalidated address.
	RetryThreshold int `toml:"retry_threshold"`
	// UDPTemplate is the path and query of the CONNECT-UDP URI template
	// (RFC 9298), with {target_host} and {target_port}; "" means
	// "/.well-known/masque/udp/{target_host}/{target_port}/".
	UDPTemplate string `toml:"udp_template"`
}

// Documented defaults of [HTTP3].
const (
	defaultH3Streams       = 100
	defaultH3Flows         = 64
	defaultH3ListenerFlows = 10000
)

// setHTTP3Defaults fills the zero values of [HTTP3] that have a default.
func (c *Config) setHTTP3Defaults() {
	h := &c.HTTP3
	setInt(&h.MaxStreams, defaultH3Streams)
	setInt(&h.MaxFlows, defaultH3Flows)
	setInt(&h.MaxListenerFlows, defaultH3ListenerFlows)
	setString(&h.UDPTemplate, masque.DefaultTemplate)
	if h.RetryThreshold == 0 {
		h.RetryThreshold = max(1, c.Limits.MaxTLSHandshakes/4)
	}
}

// validateHTTP3 checks the [http3] table, and each listener's http3 key:
// for https listeners only, and not with proxy_protocol (a QUIC client's
// address is its packets' source: no PROXY header precedes them).
func (c *Config) validateHTTP3(v *validator) {
	h := c.HTTP3
	v.check(h.MaxConnections >= 0, "http3.max_connections", "%d is negative", h.MaxConnections)
	v.check(h.RetryThreshold > 0 || h.RetryThreshold == -1, "http3.retry_threshold",
		"%d is neither positive nor -1 (a Retry for every unvalidated address)", h.RetryThreshold)
	v.check(h.MaxStreams > 0, "http3.max_streams", "%d is not positive", h.MaxStreams)
	v.check(h.MaxFlows > 0, "http3.max_flows", "%d is not positive", h.MaxFlows)
	v.check(h.MaxListenerFlows > 0, "http3.max_listener_flows", "%d is not positive", h.MaxListenerFlows)
	if _, err := masque.ParseTemplate(h.UDPTemplate); err != nil {
		v.add("http3.udp_template", err)
	}
	for i, l := range c.Listen {
		if !l.HTTP3 {
			continue
		}
		key := fmt.Sprintf("listen[%d].http3", i)
		switch {
		case l.Protocol != "https":
			v.add(key, fmt.Errorf("is only for https listeners, not %q", l.Protocol))
		case l.ProxyProtocol:
			v.add(key, errors.New("cannot be on with proxy_protocol: QUIC packets carry no PROXY header"))
		}
	}
}
