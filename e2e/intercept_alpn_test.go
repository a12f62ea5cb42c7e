//go:build linux

package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// alpnOrigin answers / with the protocol and Authorization it got, and
// /grpc as a gRPC server does a unary call: the request read, then the
// reply, its status in trailers after the body. (Reading first matters:
// rustle ends a stream whose answer is complete before the client's
// upload with RST_STREAM NO_ERROR, RFC 9113 §8.1, and curl 7.88 exited
// 92 on that in about one run of three when the origin answered
// without reading.)
var alpnOrigin = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/grpc" {
		in, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Trailer", "Grpc-Status, Grpc-Message")
		io.WriteString(w, "grpc reply to "+string(in))
		w.(http.Flusher).Flush()
		w.Header().Set("Grpc-Status", "0")
		w.Header().Set("Grpc-Message", "ok")
		return
	}
	fmt.Fprintf(w, "alpn origin %s %s auth=%q\n", r.Proto, r.URL.RequestURI(), r.Header.Get("Authorization"))
})

// TestInterceptOriginProtocols runs the binary intercepting the tunnels
// to two Go origins, one that speaks only h2 (as a gRPC server) and one
// that speaks only http/1.1, and drives it with curl (--cacert,
// --http1.1 and --http2 inside the tunnel) and Go's net/http (HTTP/1.1
// and HTTP/2) through its plain port: each request reaches its origin in
// the origin's protocol with the rule's Authorization, the answer comes
// back in the client's, and a gRPC-like answer's trailers reach curl.
// Before rustle spoke HTTP/2 to origins, the h2-only origin was a 502.
// Each request is an intercepted record with status 200.
func TestInterceptOriginProtocols(t *testing.T) {
	t.Parallel()
	pki := newOriginPKI(t)
	_, _, pair := pki.leaf(t, "origin")
	origins := []struct {
		name, port, proto string
	}{
		{"h2 only", portOf(proxytest.StartHTTPS(t, pair, proxytest.HTTPSOnlyH2, alpnOrigin)), "HTTP/2.0"},
		{"http1 only", portOf(proxytest.StartHTTPS(t, pair, proxytest.HTTPSOnlyHTTP1, alpnOrigin)), "HTTP/1.1"},
	}
	p, caPath, logPath := interceptRustle(t, pki.caPath, "")
	proxy := "http://" + p.addr()
	wantAuth := `auth="Bearer e2e-s3cret"`
	requests := 0
	for _, o := range origins {
		t.Run(o.name+"/curl", func(t *testing.T) {
			for _, tc := range []struct{ flag, version string }{{"--http1.1", "1.1"}, {"--http2", "2"}} {
				dir := t.TempDir()
				bodyFile, headFile := filepath.Join(dir, "body"), filepath.Join(dir, "head")
				r := curl(t, "-x", proxy, "--cacert", caPath, tc.flag, "-o", bodyFile, "-D", headFile,
					"-w", "%{http_code} %{http_version}", "https://localhost:"+o.port+"/curl")
				body, _ := os.ReadFile(bodyFile)
				want := "alpn origin " + o.proto + " /curl " + wantAuth
				if r.code != 0 || r.stdout != "200 "+tc.version || strings.TrimSpace(string(body)) != want {
					t.Errorf("curl %s: exit %d, %q, body %q (want %q), stderr %q", tc.flag, r.code, r.stdout, body, want, r.stderr)
				}
				// curl writes the trailers it got with the header fields.
				r = curl(t, "-x", proxy, "--cacert", caPath, tc.flag, "-o", bodyFile, "-D", headFile,
					"-w", "%{http_code} %{http_version}", "-H", "Content-Type: application/grpc", "--data-binary", "ping",
					"https://localhost:"+o.port+"/grpc")
				body, _ = os.ReadFile(bodyFile)
				head, _ := os.ReadFile(headFile)
				if r.code != 0 || r.stdout != "200 "+tc.version || string(body) != "grpc reply to ping" ||
					!hasHeader(string(head), "Grpc-Status", "0") || !hasHeader(string(head), "Grpc-Message", "ok") {
					t.Errorf("curl %s /grpc: exit %d, %q, body %q, head and trailers %q, stderr %q", tc.flag, r.code, r.stdout, body, head, r.stderr)
				}
			}
		})
		t.Run(o.name+"/go", func(t *testing.T) {
			b, _ := os.ReadFile(caPath)
			pool := x509.NewCertPool()
			pool.AppendCertsFromPEM(b)
			for _, h2 := range []bool{false, true} {
				tr := &http.Transport{Proxy: http.ProxyURL(proxyURL(p.addr(), "", "")), TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: h2}
				if !h2 {
					tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
				}
				c := &http.Client{Transport: tr, Timeout: 20 * time.Second}
				resp, err := c.Post("https://localhost:"+o.port+"/grpc", "application/grpc", strings.NewReader("ping"))
				if err != nil {
					t.Fatalf("Go (h2 %v): %v", h2, err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				tr.CloseIdleConnections()
				if resp.StatusCode != 200 || string(body) != "grpc reply to ping" || resp.ProtoAtLeast(2, 0) != h2 ||
					resp.Trailer.Get("Grpc-Status") != "0" || resp.Trailer.Get("Grpc-Message") != "ok" {
					t.Errorf("Go (h2 %v): %s %d %q, trailers %v", h2, resp.Proto, resp.StatusCode, body, resp.Trailer)
				}
			}
		})
		requests += 6
	}
	type record struct {
		Method, Target, Reason string
		Status                 int
		Intercepted            bool
	}
	// Per origin: 4 curl tunnels and 2 Go ones, a request in each.
	lines := waitLines(t, logPath, 2*(6+6))
	inner := 0
	for _, line := range lines {
		var r record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("access log line %q: %v", line, err)
		}
		if r.Method == "CONNECT" {
			continue
		}
		if !r.Intercepted || r.Status != 200 || r.Reason != "" {
			t.Errorf("record %s", line)
		}
		inner++
	}
	if inner != requests {
		t.Errorf("%d intercepted requests logged, want %d:\n%s", inner, requests, strings.Join(lines, "\n"))
	}
	if strings.Contains(strings.Join(lines, ""), "e2e-s3cret") {
		t.Error("the access log shows the injected token")
	}
}

// portOf returns the port of a host:port.
func portOf(hostport string) string { return hostport[strings.LastIndexByte(hostport, ':')+1:] }
