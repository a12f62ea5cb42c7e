package h2

import (
	"io"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"testing"

	"github.com/rustle-proxy/rustle/internal/limits"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// openFDs returns the process's open descriptors; -1 where /proc is not.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(ents)
}

// TestStreamsCountAsConnections opens many CONNECT streams on one
// connection: each stream past the first that holds an upstream counts as
// a connection, so the user's and the process's connection limits bound
// them (and the descriptors they hold), the rest are refused with the
// documented status, and the limits admit again once streams end.
func TestStreamsCountAsConnections(t *testing.T) {
	tests := []struct {
		name   string
		limits limits.Config
		users  map[string]string
		want   int // tunnels granted on the connection
		status int // the answer to the others
	}{
		// The connection counts as one of u's two connections, and
		// covers its first upstream; a second stream is u's second.
		{"max_connections_per_user", limits.Config{MaxConnsPerUser: 2}, map[string]string{"u": "pw"}, 2, 429},
		// This harness admits no client connection through the
		// limiter: the first upstream is the connection's, the next
		// five fill max_connections.
		{"max_connections", limits.Config{MaxConns: 5}, nil, 6, 503},
	}
	const streams = 30
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			echo := proxytest.NewEcho(t)
			p := startProxy(t, testConfig(Config{}), proxytest.NewPolicy(t, proxytest.PolicyConfig{
				Users: tt.users, Limits: &tt.limits,
			}))
			lim := p.policy.Limiter
			cc := p.client(t)
			type tunnel struct {
				w    *io.PipeWriter
				resp *http.Response
			}
			open := func(n int) (granted []tunnel, refused map[int]int) {
				t.Helper()
				refused = map[int]int{}
				for range n {
					pr, pw := io.Pipe()
					req := newRequest(t, "CONNECT", "", pr)
					req.URL = &url.URL{Host: echo.Addr}
					req.Host = echo.Addr
					if tt.users != nil {
						req.Header.Set("Proxy-Authorization", basic("u"))
					}
					resp, err := cc.RoundTrip(req)
					if err != nil {
						t.Fatalf("CONNECT: %v", err)
					}
					if resp.StatusCode != 200 {
						refused[resp.StatusCode]++
						resp.Body.Close()
						pw.Close()
						continue
					}
					granted = append(granted, tunnel{pw, resp})
				}
				return granted, refused
			}
			closeAll := func(ts []tunnel) {
				for _, tn := range ts {
					tn.w.Close()
					io.Copy(io.Discard, tn.resp.Body)
				}
			}
			runtime.GC()
			fds0 := openFDs(t)
			granted, refused := open(streams)
			// Each tunnel holds two descriptors of this process: the
			// proxy's upstream socket and the echo server's.
			fds1 := openFDs(t)
			if bound := fds0 + 2*tt.want + 4; fds0 >= 0 && fds1 > bound {
				t.Errorf("%d descriptors open with the streams, want at most %d (%d before)", fds1, bound, fds0)
			}
			if len(granted) != tt.want || refused[tt.status] != streams-tt.want {
				t.Fatalf("granted %d tunnels, refused %v; want %d granted and %d refused with %d",
					len(granted), refused, tt.want, streams-tt.want, tt.status)
			}
			closeAll(granted)
			proxytest.WaitFor(t, "the streams' counts given back", func() bool { return lim.Conns() == 0 })
			again, refused := open(tt.want)
			if len(again) != tt.want {
				t.Fatalf("after the streams ended: granted %d, refused %v; want %d", len(again), refused, tt.want)
			}
			closeAll(again)
		})
	}
}
