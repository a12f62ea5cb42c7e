package intercept_test

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/intercept"
	"github.com/rustle-proxy/rustle/internal/origin"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// alpnHandler is the origin of TestInterceptOriginALPN: / says what it
// got, /echo streams the request body back, /grpc answers as a gRPC
// server does (its status in trailers, one declared, one not), /close
// ends the connection after its answer, /abort
// resets the stream (or closes the connection) before any answer.
func alpnHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Conn", r.RemoteAddr)
		msg := fmt.Sprintf("proto=%s authorization=%q te=%q\n", r.Proto, r.Header.Get("Authorization"), r.Header.Get("Te"))
		w.Header().Set("Server", "test-origin")
		w.Header().Set("Content-Length", fmt.Sprint(len(msg)))
		io.WriteString(w, msg)
	})
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		// HTTP/1.1's server reads the body on after answering only so.
		http.NewResponseController(w).EnableFullDuplex()
		buf := make([]byte, 16<<10)
		for {
			n, err := r.Body.Read(buf)
			w.Write(buf[:n])
			w.(http.Flusher).Flush()
			if err != nil {
				return
			}
		}
	})
	mux.HandleFunc("/grpc", func(w http.ResponseWriter, r *http.Request) {
		in, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Trailer", "Grpc-Status")
		w.WriteHeader(200)
		w.Write(append([]byte("reply to "), in...))
		w.(http.Flusher).Flush()
		w.Header().Set("Grpc-Status", "0")
		w.Header().Set(http.TrailerPrefix+"Grpc-Message", "all-good")
	})
	mux.HandleFunc("/close", func(w http.ResponseWriter, r *http.Request) {
		// HTTP/2's server sends GOAWAY after this answer.
		w.Header().Set("Connection", "close")
		w.Header().Set("X-Conn", r.RemoteAddr)
		io.WriteString(w, "closing\n")
	})
	mux.HandleFunc("/abort", func(w http.ResponseWriter, r *http.Request) { panic(http.ErrAbortHandler) })
	return mux
}

// TestInterceptOriginALPN checks that rustle speaks to an intercepted
// tunnel's origin the protocol the origin chose by ALPN: an origin that
// speaks only h2 (a gRPC server; a 502 before rustle spoke HTTP/2 to
// origins) and one that speaks only http/1.1 both serve Go clients that
// speak HTTP/1.1 and HTTP/2 to rustle. Each request keeps the rule's
// edits (Authorization set, Server removed, X-Injected added), a body of
// 1 MiB streams to the origin and back, a gRPC-like answer's trailers
// (declared and not) reach the client, a HEAD keeps its length, the
// request after an answer that closes the connection (GOAWAY) goes on a
// fresh one, an origin that resets the request is a 502 with a one-line
// reason, and
// each request is an intercepted record with the status the client got.
func TestInterceptOriginALPN(t *testing.T) {
	cert, roots := proxytest.SelfSigned(t)
	edits, err := origin.NewEdits(origin.EditConfig{
		RequestSet:     []origin.HeaderField{{Name: "Authorization", Value: "Bearer secret-token"}},
		ResponseSet:    []origin.HeaderField{{Name: "X-Injected", Value: "1"}},
		ResponseRemove: []string{"Server"},
	})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, envConfig{
		rules: []intercept.Rule{{Name: "api", Match: acl.Rule{Hosts: []string{"localhost"}}, Edits: edits}},
		roots: roots,
		pool:  true,
	})
	origins := []struct {
		name   string
		protos proxytest.HTTPSProtocols
		proto  string // what the origin sees
		te     string // the TE field it gets: HTTP/2's says trailers are relayed
	}{
		{"h2 only", proxytest.HTTPSOnlyH2, "HTTP/2.0", "trailers"},
		{"http1 only", proxytest.HTTPSOnlyHTTP1, "HTTP/1.1", ""},
	}
	big := make([]byte, 1<<20)
	rand.Read(big)
	requests := 0
	for _, o := range origins {
		host := proxytest.StartHTTPS(t, cert, o.protos, alpnHandler())
		for _, cl := range []struct {
			name, proto string
			h2          bool
		}{
			{"client http1", "HTTP/1.1", false},
			{"client h2", "HTTP/2.0", true},
		} {
			t.Run(o.name+"/"+cl.name, func(t *testing.T) {
				c := e.client(t, cl.h2, "")
				resp, body := get(t, c, "https://"+host+"/")
				want := fmt.Sprintf("proto=%s authorization=%q te=%q", o.proto, "Bearer secret-token", o.te)
				if resp.StatusCode != 200 || strings.TrimSpace(body) != want {
					t.Fatalf("GET: %d %q, want 200 %q", resp.StatusCode, body, want)
				}
				if resp.Proto != cl.proto {
					t.Errorf("client spoke %s to rustle, want %s", resp.Proto, cl.proto)
				}
				if resp.Header.Get("Server") != "" || resp.Header.Get("X-Injected") != "1" {
					t.Errorf("response fields %v: want Server removed, X-Injected set", resp.Header)
				}
				if resp.ContentLength != int64(len(body)) {
					t.Errorf("Content-Length %d for a body of %d", resp.ContentLength, len(body))
				}

				// A body of unknown length, streamed to the origin and back.
				pr, pw := io.Pipe()
				go func() {
					for i := 0; i < len(big); i += 64 << 10 {
						if _, err := pw.Write(big[i : i+64<<10]); err != nil {
							return
						}
					}
					pw.Close()
				}()
				req, _ := http.NewRequest("POST", "https://"+host+"/echo", pr)
				eresp, err := c.Do(req)
				if err != nil {
					t.Fatalf("POST /echo: %v", err)
				}
				got, err := io.ReadAll(eresp.Body)
				eresp.Body.Close()
				if err != nil || eresp.StatusCode != 200 || !bytes.Equal(got, big) {
					t.Fatalf("POST /echo: %d, %d bytes back of %d, %v", eresp.StatusCode, len(got), len(big), err)
				}

				// gRPC-like: the answer's status in trailers.
				req, _ = http.NewRequest("POST", "https://"+host+"/grpc", strings.NewReader("hello"))
				req.Header.Set("Content-Type", "application/grpc")
				req.Header.Set("Te", "trailers")
				gresp, err := c.Do(req)
				if err != nil {
					t.Fatalf("POST /grpc: %v", err)
				}
				gbody, err := io.ReadAll(gresp.Body)
				gresp.Body.Close()
				if err != nil || gresp.StatusCode != 200 || string(gbody) != "reply to hello" {
					t.Fatalf("POST /grpc: %d %q %v", gresp.StatusCode, gbody, err)
				}
				if s, m := gresp.Trailer.Get("Grpc-Status"), gresp.Trailer.Get("Grpc-Message"); s != "0" || m != "all-good" {
					t.Errorf("POST /grpc: trailers %v, want Grpc-Status 0 and Grpc-Message all-good", gresp.Trailer)
				}

				req, _ = http.NewRequest("HEAD", "https://"+host+"/", nil)
				hresp, err := c.Do(req)
				if err != nil {
					t.Fatalf("HEAD: %v", err)
				}
				hresp.Body.Close()
				if hresp.StatusCode != 200 || hresp.ContentLength != int64(len(body)) {
					t.Errorf("HEAD: %d, length %d, want 200, %d", hresp.StatusCode, hresp.ContentLength, len(body))
				}
				// An HTTP/1.1 client connection keeps its connection to
				// the origin from one request to the next (an HTTP/2
				// one's streams take theirs from the pool, which may hold
				// several).
				if gc, hc := resp.Header.Get("X-Conn"), hresp.Header.Get("X-Conn"); !cl.h2 && hc != gc {
					t.Errorf("HEAD went to the origin on %s, the GET before on %s: not kept", hc, gc)
				}

				// The origin ends the connection after this answer: the
				// next request goes on a fresh one.
				cresp, cbody := get(t, c, "https://"+host+"/close")
				if cresp.StatusCode != 200 || cbody != "closing\n" {
					t.Errorf("GET /close: %d %q", cresp.StatusCode, cbody)
				}
				conn := cresp.Header.Get("X-Conn")
				if resp, body := get(t, c, "https://"+host+"/"); resp.StatusCode != 200 || strings.TrimSpace(body) != want ||
					resp.Header.Get("X-Conn") == conn {
					t.Errorf("GET after /close: %d %q on %s, want 200 on another connection than %s", resp.StatusCode, body, resp.Header.Get("X-Conn"), conn)
				}

				aresp, abody := get(t, c, "https://"+host+"/abort")
				if aresp.StatusCode != 502 || !strings.Contains(abody, "upstream "+host) || strings.Count(abody, "\n") != 1 {
					t.Errorf("GET /abort: %d %q, want 502 with a one-line reason", aresp.StatusCode, abody)
				}
				requests += 7
			})
		}
	}
	recs := e.records(t, requests+4)
	byPath := map[string]int{}
	for _, r := range recs {
		if r.Method == "CONNECT" {
			continue
		}
		if !r.Intercepted || r.SNI != "localhost" {
			t.Errorf("record %+v: not intercepted", r)
		}
		path := r.Target[strings.LastIndexByte(r.Target, '/'):]
		byPath[path]++
		want := 200
		if path == "/abort" {
			want = 502
			if r.Reason != "upstream-failed" {
				t.Errorf("record %+v: want reason upstream-failed", r)
			}
		}
		if r.Status != want {
			t.Errorf("record %+v: want status %d", r, want)
		}
	}
	for _, p := range []string{"/", "/echo", "/grpc", "/close", "/abort"} {
		n := 4
		if p == "/" {
			n = 12 // GET, HEAD, GET after /close
		}
		if byPath[p] != n {
			t.Errorf("%d records of %s, want %d:\n%s", byPath[p], p, n, e.log.String())
		}
	}
	if strings.Contains(e.log.String(), "secret-token") {
		t.Error("the access log shows the injected value")
	}
}
