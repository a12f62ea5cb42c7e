package h3

import (
	"crypto/tls"
	"io"
	"net"
	"strings"
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

	good := tls.Client(open(), e.ClientConfig())
	if err := good.Handshake(); err != nil {
		t.Fatalf("TLS through the checked stream: %v", err)
	}
	io.WriteString(good, "ping")
	buf := make([]byte, 4)
	if _, err := io.ReadFull(good, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo through the checked stream: %q %v", buf, err)
	}
	good.Close()

	before := e.Conns()
	fronted := tls.Client(open(), &tls.Config{ServerName: "blocked.example", InsecureSkipVerify: true})
	if err := fronted.Handshake(); err == nil {
		t.Fatal("a fronted hello got through an HTTP/3 stream under match")
	}
	if n := e.Conns() - before; n != 0 {
		t.Errorf("the origin got %d connections for a fronted stream, want none", n)
	}
	proxytest.WaitFor(t, "2 access log records", func() bool { return strings.Count(out.String(), "\n") >= 2 })
	log := out.String()
	for _, want := range []string{`"sni":"localhost"`, `"sni":"blocked.example"`, `"reason":"sni-mismatch"`, `"protocol":"h3"`} {
		if !strings.Contains(log, want) {
			t.Errorf("access log lacks %s:\n%s", want, log)
		}
	}
}
