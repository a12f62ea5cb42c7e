package server

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// TestHTTPSListenerH2 checks that an https listener speaks HTTP/2 to a
// client that offers it, and that shutdown drains an HTTP/2 tunnel.
func TestHTTPSListenerH2(t *testing.T) {
	tl, roots := proxyCerts(t)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "h2 origin "+r.URL.Path+" "+r.Proto)
	}))
	t.Cleanup(origin.Close)
	echo := proxytest.NewEcho(t)
	s, addrs := startListeners(t, 5*time.Second,
		config.Listener{Name: "tls", Address: "127.0.0.1:0", Protocol: "https", TLS: tl})

	tc, err := tls.Dial("tcp", addrs[0], &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", NextProtos: []string{"h2", "http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	if p := tc.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("ALPN: %q, want h2", p)
	}
	cc, err := (&http2.Transport{AllowHTTP: true}).NewClientConn(tc)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	auth := "Basic " + base64.StdEncoding.EncodeToString([]byte("alice:pw"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	req, _ := http.NewRequestWithContext(ctx, "GET", origin.URL+"/page", nil)
	req.Header.Set("Proxy-Authorization", auth)
	resp, err := cc.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "h2 origin /page HTTP/1.1" {
		t.Fatalf("GET over h2: %d %q", resp.StatusCode, body)
	}

	pr, pw := io.Pipe()
	req, _ = http.NewRequestWithContext(ctx, "CONNECT", "", pr)
	req.URL, req.Host = &url.URL{Host: echo.Addr}, echo.Addr
	req.Header.Set("Proxy-Authorization", auth)
	resp, err = cc.RoundTrip(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT over h2: %v %v", resp, err)
	}
	defer resp.Body.Close()

	// Shutdown waits for the tunnel, which keeps working meanwhile.
	shut := shutdownAsync(s)
	time.Sleep(100 * time.Millisecond)
	checkDrained(t, shut, pw, resp.Body, "HTTP/2")
}

// shutdownAsync starts s's Shutdown, given 5 s, and returns where its
// result will be.
func shutdownAsync(s *Server) <-chan error {
	shut := make(chan error, 1)
	go func() {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		shut <- s.Shutdown(sctx)
	}()
	return shut
}

// checkDrained checks that a shutdown under way (its result to come on
// shut) waits for a tunnel of proto, written through pw and read from
// body, while the tunnel goes on working, and returns once the client
// ends it.
func checkDrained(t *testing.T, shut <-chan error, pw io.WriteCloser, body io.Reader, proto string) {
	t.Helper()
	io.WriteString(pw, "during shutdown")
	buf := make([]byte, len("during shutdown"))
	if _, err := io.ReadFull(body, buf); err != nil || string(buf) != "during shutdown" {
		t.Fatalf("tunnel during shutdown: %q, %v", buf, err)
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned (%v) while an %s tunnel was open", err, proto)
	default:
	}
	pw.Close()
	if _, err := io.ReadAll(body); err != nil {
		t.Fatalf("tunnel end: %v", err)
	}
	select {
	case err := <-shut:
		if err != nil {
			t.Fatalf("Shutdown: %v, want the connection drained", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Shutdown did not return after the tunnel ended")
	}
}
