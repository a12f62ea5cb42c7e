package h3

import (
	"net"
	"testing"

	"github.com/rustle-proxy/rustle/internal/proxytest"
	"github.com/rustle-proxy/rustle/internal/sni"
)

// TestSNICheck opens CONNECT streams with quic-go's HTTP/3 client
// through a listener whose SNI check is match, to a Go TLS origin: a
// TLS handshake naming the CONNECT's host goes through and carries
// bytes; one naming another host has its stream reset after the 200,
// before the origin sees a connection; the access log names both.
func TestSNICheck(t *testing.T) {
	e := proxytest.NewTLSEcho(t)
	_, port, _ := net.SplitHostPort(e.Addr)
	target := "localhost:" + port
	var out proxytest.LogBuffer
	al := proxytest.JSONAccessLog(t, &out)
	p := startProxy(t, testConfig(), proxytest.NewPolicy(t, proxytest.PolicyConfig{AccessLog: al, SNI: sni.Match}))
	cc := p.client(t)
	open := func() net.Conn {
		resp, pw := connectStream(t, cc, target, "")
		if resp.StatusCode != 200 {
			t.Fatalf("CONNECT %s: %d", target, resp.StatusCode)
		}
		return proxytest.StreamConn(resp.Body, pw)
	}

	proxytest.CheckSNIMatch(t, e, open, &out, "h3", "an HTTP/3 stream")
}
