package httpproxy_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// wsEchoServer is a WebSocket origin that echoes every message with its
// type, and answers plain requests to /plain with 200 "plain".
func wsEchoServer(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/plain" {
			w.Write([]byte("plain"))
			return
		}
		if r.URL.Path == "/refuse" {
			http.Error(w, "no websocket here", http.StatusForbidden)
			return
		}
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		c.SetReadLimit(1 << 20)
		ctx := r.Context()
		for {
			typ, msg, err := c.Read(ctx)
			if err != nil {
				return
			}
			if err := c.Write(ctx, typ, msg); err != nil {
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// proxiedClient returns an HTTP client that sends everything through the
// proxy at addr, with credentials when user is not empty.
func proxiedClient(addr, user, pass string) *http.Client {
	pu := &url.URL{Scheme: "http", Host: addr}
	if user != "" {
		pu.User = url.UserPassword(user, pass)
	}
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}, Timeout: 10 * time.Second}
}

func TestWebSocketThroughProxy(t *testing.T) {
	srv := wsEchoServer(t)
	tests := []struct {
		name   string
		users  map[string]string
		user   string
		scheme string
	}{
		{"no auth, ws scheme", nil, "", "ws"},
		{"no auth, http scheme", nil, "", "http"},
		{"basic auth", map[string]string{"u": "p"}, "u", "ws"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			proxy := startProxy(t, testCfg{}, proxytest.PolicyConfig{Users: tt.users})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			u := tt.scheme + strings.TrimPrefix(srv.URL, "http") + "/echo"
			c, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: proxiedClient(proxy, tt.user, "p")})
			if err != nil {
				t.Fatalf("dial %s through the proxy: %v", u, err)
			}
			defer c.CloseNow()
			c.SetReadLimit(1 << 20)
			if resp.StatusCode != http.StatusSwitchingProtocols {
				t.Fatalf("status %d, want 101", resp.StatusCode)
			}
			msgs := []struct {
				typ  websocket.MessageType
				data []byte
			}{
				{websocket.MessageText, []byte("hello through rustle")},
				{websocket.MessageBinary, bytes.Repeat([]byte{0, 1, 2, 0xff}, 40000)},
				{websocket.MessageText, []byte("")},
			}
			for _, m := range msgs {
				if err := c.Write(ctx, m.typ, m.data); err != nil {
					t.Fatalf("write: %v", err)
				}
				typ, got, err := c.Read(ctx)
				if err != nil {
					t.Fatalf("read: %v", err)
				}
				if typ != m.typ || !bytes.Equal(got, m.data) {
					t.Fatalf("echo of a %v message of %d bytes came back as %v of %d bytes", m.typ, len(m.data), typ, len(got))
				}
			}
			if err := c.Close(websocket.StatusNormalClosure, "bye"); err != nil {
				t.Fatalf("close handshake: %v", err)
			}
		})
	}
}

func TestWebSocketNeedsAuth(t *testing.T) {
	srv := wsEchoServer(t)
	proxy := startProxy(t, testCfg{}, proxytest.PolicyConfig{Users: map[string]string{"u": "p"}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, resp, err := websocket.Dial(ctx, srv.URL+"/echo", &websocket.DialOptions{HTTPClient: proxiedClient(proxy, "u", "wrong")})
	if err == nil {
		t.Fatal("upgrade with a wrong password succeeded")
	}
	if resp == nil || resp.StatusCode != http.StatusProxyAuthRequired {
		t.Fatalf("response %v, want 407", resp)
	}
}

// TestWebSocketRefused checks that an origin's non-101 answer to an
// upgrade leaves the connection a normal HTTP connection.
func TestWebSocketRefused(t *testing.T) {
	srv := wsEchoServer(t)
	proxy := startProxy(t, testCfg{}, proxytest.PolicyConfig{})
	cl := proxytest.Dial(t, proxy)
	host := strings.TrimPrefix(srv.URL, "http://")
	upgrade := "GET " + srv.URL + "/refuse HTTP/1.1\r\nHost: " + host + "\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n" +
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
	resp, _ := cl.RoundTrip(upgrade)
	if resp.Status != http.StatusForbidden {
		t.Fatalf("refused upgrade: status %d, want 403", resp.Status)
	}
	resp, _ = cl.RoundTrip("GET " + srv.URL + "/plain HTTP/1.1\r\nHost: " + host + "\r\n\r\n")
	if resp.Status != http.StatusOK || string(resp.Body) != "plain" {
		t.Fatalf("request after a refused upgrade: %d %q, want 200 \"plain\"", resp.Status, resp.Body)
	}
}

// TestUpgradeHeadersForwarded checks what the origin receives for a
// WebSocket handshake, and that other upgrades are not passed on.
func TestUpgradeHeadersForwarded(t *testing.T) {
	o := proxytest.NewOrigin(t, proxytest.Respond(400, "no"))
	proxy := startProxy(t, testCfg{}, proxytest.PolicyConfig{})
	tests := []struct {
		name, upgrade, connection string
		wantUpgrade               bool
	}{
		{"websocket", "websocket", "Upgrade", true},
		{"case and list", "WebSocket", "keep-alive, upgrade", true},
		{"h2c is not relayed", "h2c", "Upgrade, HTTP2-Settings", false},
		{"upgrade without connection", "websocket", "keep-alive", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cl := proxytest.Dial(t, proxy)
			n := o.NumRequests()
			cl.RoundTrip("GET " + o.URL("/ws") + " HTTP/1.1\r\nHost: x\r\nConnection: " + tt.connection +
				"\r\nUpgrade: " + tt.upgrade + "\r\n\r\n")
			reqs := o.Requests()
			if len(reqs) != n+1 {
				t.Fatalf("origin saw %d requests, want %d", len(reqs), n+1)
			}
			h := reqs[n].Header
			if got := h.Has("Upgrade"); got != tt.wantUpgrade {
				t.Errorf("Upgrade forwarded = %v, want %v (head %q)", got, tt.wantUpgrade, reqs[n].Head)
			}
			if tt.wantUpgrade && !strings.EqualFold(h.Get("Connection"), "upgrade") {
				t.Errorf("Connection = %q, want Upgrade", h.Get("Connection"))
			}
			if !tt.wantUpgrade && h.Has("Connection") {
				t.Errorf("Connection forwarded for a non-WebSocket upgrade: %q", h.Get("Connection"))
			}
		})
	}
}
