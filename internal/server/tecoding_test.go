package server

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// TestResponseTransferCodings checks that every front-end treats an
// origin's response in a transfer coding other than chunked alike: HTTP/1.1
// (plain port), HTTP/2 and HTTP/3 answer it 502, saying so, with the
// access log reason upstream-failed, whether it has a body or not (a HEAD,
// a 304). rustle never forwards a client's TE, so an origin has no leave to
// use another coding; HTTP/2 and HTTP/3 have no transfer codings to pass
// one on in, and an HTTP/1.1 client that did not ask for it may not read
// it. Before, HTTP/1.1 relayed "gzip, chunked" and "identity, chunked"
// (and "gzip", close-delimited) as they came while HTTP/2 and HTTP/3
// answered 502, and HTTP/2 relayed them without a body where HTTP/3 did
// not. A chunked response goes through on all three.
func TestResponseTransferCodings(t *testing.T) {
	r := startAuthRig(t, func(c *config.Config) { c.Listen[1].HTTP3 = true })
	origin := proxytest.NewOrigin(t, nil)
	const body = "2\r\nok\r\n0\r\n\r\n"
	origin.Handle("/chunked", proxytest.Raw("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"+body))
	origin.Handle("/gzip-chunked", proxytest.Raw("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"+body))
	origin.Handle("/identity-chunked", proxytest.Raw("HTTP/1.1 200 OK\r\nTransfer-Encoding: identity, chunked\r\n\r\n"+body))
	origin.Handle("/identity-then-chunked", proxytest.Raw("HTTP/1.1 200 OK\r\nTransfer-Encoding: identity\r\nTransfer-Encoding: chunked\r\n\r\n"+body))
	origin.Handle("/gzip", proxytest.ThenClose(proxytest.Raw("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nzipped")))
	origin.Handle("/head-gzip-chunked", proxytest.Raw("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"))
	origin.Handle("/304-gzip-chunked", proxytest.Raw("HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"))
	const refusal = "rustle: upstream used a transfer coding other than chunked\n"

	h2c := r.dialH2(t)
	_, h3c := dialH3(t, r.addr["tls"], r.roots)
	frontEnds := []struct {
		name, listener, protocol string
		do                       func(method, target string) (int, string, error)
	}{
		{"http", "plain", "http", func(method, target string) (int, string, error) {
			return rawExchange(r.addr["plain"], method, target)
		}},
		{"h2", "tls", "h2", func(method, target string) (int, string, error) {
			return roundTrip(h2c, method, target)
		}},
		{"h3", "tls", "h3", func(method, target string) (int, string, error) {
			return roundTrip(h3c, method, target)
		}},
	}
	for _, fe := range frontEnds {
		t.Run(fe.name, func(t *testing.T) {
			for _, tc := range []struct {
				method, path string
				status       int
				body         string
			}{
				{"GET", "/chunked", 200, "ok"},
				{"GET", "/gzip-chunked", 502, refusal},
				{"GET", "/identity-chunked", 502, refusal},
				{"GET", "/identity-then-chunked", 502, refusal},
				{"GET", "/gzip", 502, refusal},
				{"HEAD", "/head-gzip-chunked", 502, ""},
				{"GET", "/304-gzip-chunked", 502, refusal},
			} {
				t.Run(tc.method+" "+tc.path, func(t *testing.T) {
					target := origin.URL(tc.path) + "?" + fe.name
					status, got, err := fe.do(tc.method, target)
					if err != nil || status != tc.status || got != tc.body {
						t.Fatalf("%d %q %v, want %d %q", status, got, err, tc.status, tc.body)
					}
					if tc.status != 502 {
						return
					}
					r.records(t, 1, func(rec conformRecord) bool {
						return rec.Listener == fe.listener && rec.Protocol == fe.protocol && rec.Target == target &&
							rec.Status == 502 && rec.Reason == "upstream-failed"
					})
				})
			}
		})
	}
}

// rawExchange sends method for target on a fresh HTTP/1.1 connection to
// the proxy at addr, as alice, and returns the status and body of the
// answer, read as the bytes up to the connection's close: a relayed
// response in a transfer coding Go's client refuses is read too.
func rawExchange(addr, method, target string) (int, string, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return 0, "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	req := method + " " + target + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\nProxy-Authorization: " + basicValue("alice", "pw") + "\r\n\r\n"
	if _, err := io.WriteString(c, req); err != nil {
		return 0, "", err
	}
	all, err := io.ReadAll(c)
	if err != nil {
		return 0, "", err
	}
	head, body, _ := strings.Cut(string(all), "\r\n\r\n")
	if strings.Contains(head, "\r\nTransfer-Encoding: chunked") {
		b, err := io.ReadAll(httputil.NewChunkedReader(strings.NewReader(body)))
		if err != nil {
			return 0, "", fmt.Errorf("chunked body %q: %w", body, err)
		}
		body = string(b)
	}
	var status int
	if _, err := fmt.Sscanf(head, "HTTP/1.1 %d ", &status); err != nil {
		return 0, "", fmt.Errorf("answer %q: %w", all, err)
	}
	return status, body, nil
}

// roundTrip sends method for target through rt (an HTTP/2 or HTTP/3
// client connection to the proxy) as alice, and returns the status and
// body of the answer.
func roundTrip(rt http.RoundTripper, method, target string) (int, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, target, nil)
	req.Header.Set("Proxy-Authorization", basicValue("alice", "pw"))
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}
