package server

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// TestTraceThroughSquid checks TRACE and OPTIONS with Max-Forwards on a
// route through a real Squid that rustle authenticates to, on the
// HTTP/1.1 and the HTTP/2 front-ends. At Max-Forwards 0 rustle answers
// itself: a TRACE with an echo of what it received less the client's
// credentials, an OPTIONS with the methods it serves; Squid never sees
// them. A TRACE above 0 never goes to Squid as a request (Squid, at 0,
// would answer it with an echo of what rustle sent it, rustle's
// credentials for it included; other proxies print them): it goes
// through a CONNECT tunnel to the origin, which gets it one hop less and
// without Squid's Via. An OPTIONS above 0 goes to Squid one less, and
// Squid takes one more off. No answer holds the parent's credentials or
// the client's.
func TestTraceThroughSquid(t *testing.T) {
	squid := proxytest.StartSquid(t)
	type seen struct{ method, maxForwards, via, proxyAuth string }
	var mu sync.Mutex
	var got []seen
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, seen{r.Method, r.Header.Get("Max-Forwards"), r.Header.Get("Via"), r.Header.Get("Proxy-Authorization")})
		mu.Unlock()
		fmt.Fprintf(w, "origin %s", r.Method)
	}))
	t.Cleanup(origin.Close)
	tl, roots := proxyCerts(t)
	squidCreds := proxytest.SquidUser + ":" + proxytest.SquidPassword
	addrs, _, _ := startRouted(t, func(c *config.Config) {
		c.AllowPrivate = []string{"127.0.0.0/8"}
		c.Auth.Users = []config.User{{Name: "alice", Password: "alicepw"}}
		c.Listen = append(c.Listen, config.Listener{Name: "tls", Address: "127.0.0.1:0", Protocol: "https", TLS: tl})
		c.Parents = []config.Parent{{Name: "squid", URL: "http://" + squidCreds + "@" + squid.Addr}}
		c.Routes = []config.Route{{Name: "all", Via: config.Strings{"squid"}}}
	})
	clientCreds := "alice:alicepw"
	secrets := []string{
		proxytest.SquidPassword, base64.StdEncoding.EncodeToString([]byte(squidCreds)),
		"alicepw", base64.StdEncoding.EncodeToString([]byte(clientCreds)),
		"Proxy-Authorization", "proxy-authorization", "s3cret",
	}

	// send sends method to the origin's path through rustle's plain port
	// (HTTP/1.1) or its TLS port (HTTP/2), with Max-Forwards mf.
	h1 := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", User: url.UserPassword("alice", "alicepw"), Host: addrs["plain"]})}}
	send := func(t *testing.T, proto, method, path, mf string) (*http.Response, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, method, origin.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Max-Forwards", mf)
		req.Header.Set("Cookie", "sid=s3cret")
		var resp *http.Response
		if proto == "HTTP/1.1" {
			resp, err = h1.Do(req)
		} else {
			tc, derr := tls.Dial("tcp", addrs["tls"], &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", NextProtos: []string{"h2"}})
			if derr != nil {
				t.Fatal(derr)
			}
			cc, cerr := (&http2.Transport{AllowHTTP: true}).NewClientConn(tc)
			if cerr != nil {
				t.Fatal(cerr)
			}
			defer cc.Close()
			req.Header.Set("Proxy-Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(clientCreds)))
			resp, err = cc.RoundTrip(req)
		}
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, string(b)
	}

	for _, proto := range []string{"HTTP/1.1", "HTTP/2"} {
		t.Run(proto, func(t *testing.T) {
			tests := []struct {
				name, method, mf string
				echo             bool   // rustle answers with its echo
				allow            bool   // rustle answers with Allow
				originMF         string // what the origin got; "-" = nothing
				viaSquid         bool   // the origin's request came through Squid
			}{
				{name: "TRACE at 0", method: "TRACE", mf: "0", echo: true, originMF: "-"},
				{name: "TRACE at 1", method: "TRACE", mf: "1", originMF: "0"},
				{name: "TRACE at 4", method: "TRACE", mf: "4", originMF: "3"},
				{name: "OPTIONS at 0", method: "OPTIONS", mf: "0", allow: true, originMF: "-"},
				{name: "OPTIONS at 2", method: "OPTIONS", mf: "2", originMF: "0", viaSquid: true},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					mu.Lock()
					before := len(got)
					mu.Unlock()
					resp, body := send(t, proto, tt.method, "/"+strings.ReplaceAll(tt.name, " ", "-"), tt.mf)
					if resp.StatusCode != 200 {
						t.Fatalf("status %d %q", resp.StatusCode, body)
					}
					for _, s := range secrets {
						if strings.Contains(body, s) {
							t.Errorf("the answer's body holds %q:\n%s", s, body)
						}
					}
					if strings.Contains(strings.ToLower(resp.Header.Get("Server")+resp.Header.Get("Via")), "squid") && (tt.echo || tt.allow) {
						t.Errorf("Squid answered: %v", resp.Header)
					}
					switch {
					case tt.echo:
						if ct := resp.Header.Get("Content-Type"); ct != "message/http" || !strings.HasPrefix(body, "TRACE "+origin.URL+"/") {
							t.Errorf("echo %s %q", ct, body)
						}
					case tt.allow:
						if a := resp.Header.Get("Allow"); !strings.Contains(a, "CONNECT") || !strings.Contains(a, "TRACE") {
							t.Errorf("Allow %q", a)
						}
					default:
						if body != "origin "+tt.method {
							t.Errorf("body %q, want the origin's", body)
						}
					}
					mu.Lock()
					now := got[before:]
					mu.Unlock()
					if tt.originMF == "-" {
						if len(now) != 0 {
							t.Errorf("the origin got %+v", now)
						}
						return
					}
					if len(now) != 1 {
						t.Fatalf("the origin got %+v, want one request", now)
					}
					o := now[0]
					if o.method != tt.method || o.maxForwards != tt.originMF || o.proxyAuth != "" {
						t.Errorf("the origin got %+v, want Max-Forwards %s", o, tt.originMF)
					}
					if fromSquid := strings.Contains(o.via, "squid"); fromSquid != tt.viaSquid {
						t.Errorf("the origin got Via %q: through Squid %v, want %v", o.via, fromSquid, tt.viaSquid)
					}
				})
			}
		})
	}
}
