package proxytest

import (
	"crypto/tls"
	"io"
	"net"
	"strings"
	"testing"
)

// CheckSNIMatch checks a front-end whose SNI check is match through
// open, which opens a tunnel (an HTTP/2 or HTTP/3 CONNECT stream, for
// example) to e under the name "localhost": a TLS handshake naming
// localhost goes through it and carries bytes both ways; one naming
// another host (domain fronting) fails before e sees a connection; and
// out, the front-end's JSON access log, names both hellos' server names,
// the refusal's reason and the protocol proto. what names the tunnel in
// the failure of the fronted handshake ("an HTTP/2 stream").
func CheckSNIMatch(t testing.TB, e *EchoServer, open func() net.Conn, out *LogBuffer, proto, what string) {
	t.Helper()
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
		t.Fatalf("a fronted hello got through %s under match", what)
	}
	if n := e.Conns() - before; n != 0 {
		t.Errorf("the origin got %d connections for a fronted stream, want none", n)
	}
	WaitFor(t, "2 access log records", func() bool { return strings.Count(out.String(), "\n") >= 2 })
	log := out.String()
	for _, want := range []string{`"sni":"localhost"`, `"sni":"blocked.example"`, `"reason":"sni-mismatch"`, `"protocol":"` + proto + `"`} {
		if !strings.Contains(log, want) {
			t.Errorf("access log lacks %s:\n%s", want, log)
		}
	}
}
