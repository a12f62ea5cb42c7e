//go:build linux

package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"io"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// TestHTTP3 runs the README's quick start for HTTP/3: the binary with a
// -L https URL with http3=1, a certificate from `rustle cert`, and quic-go's
// HTTP/3 client on the listener's port over UDP: a forwarded GET with the
// URL's credentials, and a 407 without them.
func TestHTTP3(t *testing.T) {
	t.Parallel()
	o := newOrigin(t, "127.0.0.1", false)
	certDir := rustleFiles(t, "cert")
	roots := x509.NewCertPool()
	roots.AddCert(readCertPEM(t, filepath.Join(certDir, "ca.pem")))
	p := startRustle(t, "-L", "https://alice:s3cret@127.0.0.1:0?cert="+filepath.Join(certDir, "server.pem")+
		"&key="+filepath.Join(certDir, "server.key")+"&http3=1")
	p.waitStarted(t)

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	qc, err := quic.DialAddr(ctx, p.addr(), &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", NextProtos: []string{http3.NextProtoH3}}, nil)
	if err != nil {
		t.Fatalf("QUIC to %s: %v", p.addr(), err)
	}
	defer qc.CloseWithError(0, "")
	cc := (&http3.Transport{}).NewClientConn(qc)
	for _, tc := range []struct {
		authz  string
		status int
		body   string
	}{
		{"Basic " + base64.StdEncoding.EncodeToString([]byte("alice:s3cret")), 200, "hello from origin\n"},
		{"", 407, ""},
	} {
		req, _ := http.NewRequestWithContext(ctx, "GET", o.URL+"/hello", nil)
		if tc.authz != "" {
			req.Header.Set("Proxy-Authorization", tc.authz)
		}
		resp, err := cc.RoundTrip(req)
		if err != nil {
			t.Fatalf("GET over HTTP/3: %v", err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != tc.status || tc.status == 200 && string(body) != tc.body {
			t.Fatalf("GET over HTTP/3 (credentials %v): %d %q %v, want %d", tc.authz != "", resp.StatusCode, body, err, tc.status)
		}
	}
}
