package proxytest

import (
	"crypto/tls"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"testing"
	"time"
)

// HTTPSProtocols are the protocols an HTTPS origin of StartHTTPS speaks
// (and offers by ALPN).
type HTTPSProtocols uint8

// The protocols of StartHTTPS.
const (
	// HTTPSBoth speaks h2 and http/1.1.
	HTTPSBoth HTTPSProtocols = iota
	// HTTPSOnlyH2 speaks h2 alone, as a gRPC server: a client that
	// offers no h2 fails the TLS handshake (no application protocol).
	HTTPSOnlyH2
	// HTTPSOnlyHTTP1 speaks http/1.1 alone, and offers nothing else.
	HTTPSOnlyHTTP1
)

// StartHTTPS starts net/http's server with h on 127.0.0.1, with TLS
// and cert, speaking protos, and returns its "localhost:PORT". It is
// closed when the test ends.
func StartHTTPS(t testing.TB, cert tls.Certificate, protos HTTPSProtocols, h http.Handler) string {
	t.Helper()
	var p http.Protocols
	switch protos {
	case HTTPSBoth:
		p.SetHTTP1(true)
		p.SetHTTP2(true)
	case HTTPSOnlyH2:
		p.SetHTTP2(true)
	case HTTPSOnlyHTTP1:
		p.SetHTTP1(true)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxytest: listen: %v", err)
	}
	srv := &http.Server{Handler: h, Protocols: &p, ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}},
		ErrorLog:  log.New(io.Discard, "", 0)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("proxytest: HTTPS origin: %v", err)
		}
	}()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return "localhost:" + port
}
