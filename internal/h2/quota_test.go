package h2

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/url"
	"strings"
	"testing"

	"github.com/rustle-proxy/rustle/internal/proxytest"
	"github.com/rustle-proxy/rustle/internal/quota"
)

// tunnelQuota is the byte quota of TestConnectQuota's users: odd, so that
// no write of the client's (of 4 KiB) nor a relay buffer ends on it.
const tunnelQuota = 200<<10 + 777

// TestConnectQuota checks that an HTTP/2 CONNECT tunnel whose user has a
// byte quota moves exactly what the quota allows, then is reset and
// logged with the reason quota, the quota counting the record's bytes,
// and that the user's next tunnel is refused 429. One way (all up, or all
// down) the tunnel stops at the quota to the byte: the relay sends the
// part of a buffer that reaches it, and not the rest (before, it sent the
// whole buffer that crossed it). Both ways (an echo), each direction may
// have been allowed a buffer when the other reached the quota: a buffer
// past it at most, and never under it (before, the direction that found
// the quota spent reset the stream while the other's buffer, counted, was
// on its way, and the end of the tunnel gave that back: a CI run's
// tunnel ended 3 KB under a 1 MiB quota and the next one was let in).
func TestConnectQuota(t *testing.T) {
	payload := bytes.Repeat([]byte("quota tunnel bytes\n"), 2<<20/19)
	for _, tc := range []struct {
		name     string
		upstream func(t *testing.T) (addr string, got <-chan int64)
		send     bool  // the client sends payload
		slack    int64 // how far past the quota the tunnel may go
		upOnly   bool  // what moved went up (a sink), else down (a source)
		echoOnly bool  // both ways
	}{
		{name: "up", upstream: sinkUpstream, send: true, upOnly: true},
		{name: "down", upstream: func(t *testing.T) (string, <-chan int64) { return sourceUpstream(t, payload) }},
		{name: "both", upstream: func(t *testing.T) (string, <-chan int64) { return proxytest.NewEcho(t).Addr, nil }, send: true, slack: 2 * bufSize, echoOnly: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out proxytest.LogBuffer
			al := proxytest.JSONAccessLog(t, &out)
			q := quota.New(quota.Config{Rules: []quota.Rule{{Name: "daily", Users: []string{"*"}, Period: quota.Day, Bytes: tunnelQuota}}})
			p := startProxy(t, testConfig(Config{}), proxytest.NewPolicy(t, proxytest.PolicyConfig{
				Users: map[string]string{"u": "pw"}, AccessLog: al, Quota: q,
			}))
			addr, got := tc.upstream(t)
			cc := p.client(t)
			pr, pw := io.Pipe()
			t.Cleanup(func() { pw.Close() })
			req := newRequest(t, "CONNECT", "", pr)
			req.URL = &url.URL{Host: addr}
			req.Host = addr
			req.Header.Set("Proxy-Authorization", basic("u"))
			resp, err := cc.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != 200 {
				t.Fatalf("CONNECT: status %d", resp.StatusCode)
			}
			if tc.send {
				go func() {
					for b := payload; len(b) > 0; b = b[min(len(b), 4096):] {
						if _, err := pw.Write(b[:min(len(b), 4096)]); err != nil {
							return
						}
					}
					pw.Close()
				}()
			}
			n, err := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err == nil && n == int64(len(payload)) {
				t.Fatalf("the %d bytes went through a quota of %d", n, tunnelQuota)
			}
			proxytest.WaitFor(t, "the tunnel's record", func() bool { return strings.Contains(out.String(), `"reason":"quota"`) })
			var rec struct {
				User      string `json:"user"`
				Reason    string `json:"reason"`
				BytesUp   int64  `json:"bytes_up"`
				BytesDown int64  `json:"bytes_down"`
			}
			for _, line := range strings.Split(out.String(), "\n") {
				if strings.Contains(line, `"reason":"quota"`) {
					if err := json.Unmarshal([]byte(line), &rec); err != nil {
						t.Fatal(err)
					}
					break
				}
			}
			moved := rec.BytesUp + rec.BytesDown
			t.Logf("up %d, down %d: %d bytes under a quota of %d", rec.BytesUp, rec.BytesDown, moved, tunnelQuota)
			if rec.User != "u" || moved < tunnelQuota || moved > tunnelQuota+tc.slack {
				t.Errorf("record %+v: moved %d bytes, want %d to %d", rec, moved, tunnelQuota, tunnelQuota+tc.slack)
			}
			switch {
			case tc.upOnly && rec.BytesDown != 0, !tc.upOnly && !tc.echoOnly && rec.BytesUp != 0:
				t.Errorf("record %+v: bytes the wrong way", rec)
			}
			if got != nil {
				if n := <-got; n != rec.BytesUp && tc.upOnly {
					t.Errorf("the upstream got %d bytes; the record says %d", n, rec.BytesUp)
				}
			}
			if st := q.Status("u"); len(st) != 1 || st[0].BytesUsed != moved {
				t.Errorf("quota status %+v, want the %d bytes of the record used", st, moved)
			}
			next := newRequest(t, "CONNECT", "", nil)
			next.URL = &url.URL{Host: addr}
			next.Host = addr
			next.Header.Set("Proxy-Authorization", basic("u"))
			resp, err = cc.RoundTrip(next)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 429 {
				t.Errorf("the next tunnel: status %d, want 429", resp.StatusCode)
			}
		})
	}
}

// sinkUpstream starts a TCP server that reads a connection to its end
// and sends the count of bytes it read on the channel it returns.
func sinkUpstream(t *testing.T) (string, <-chan int64) {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got := make(chan int64, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- -1
			return
		}
		defer c.Close()
		n, _ := io.Copy(io.Discard, c)
		got <- n
	}()
	return ln.Addr().String(), got
}

// sourceUpstream starts a TCP server that writes payload to the first
// connection, 4 KiB at a time, until done or the connection fails; its
// channel is nil (what it wrote is not what was relayed).
func sourceUpstream(t *testing.T, payload []byte) (string, <-chan int64) {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { <-done })
	t.Cleanup(func() { ln.Close() })
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		for b := payload; len(b) > 0; b = b[min(len(b), 4096):] {
			if _, err := c.Write(b[:min(len(b), 4096)]); err != nil {
				return
			}
		}
	}()
	return ln.Addr().String(), nil
}
