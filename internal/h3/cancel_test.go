package h3

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// TestForwardCanceledMidResponse checks forwarded requests that their
// client cancels while they are in progress, at any moment, as a load
// tool does at the end of a run: the proxy survives every one of them
// and still serves.
func TestForwardCanceledMidResponse(t *testing.T) {
	body := string(make([]byte, 1024))
	o := proxytest.NewOrigin(t, proxytest.Respond(200, body))
	pool := proxytest.NewPool(t, dialer.PoolConfig{MaxIdlePerHost: 64, MaxIdle: 64, IdleTimeout: time.Minute})
	p := startProxy(t, testConfig(), proxytest.NewPolicy(t, proxytest.PolicyConfig{Pool: pool}))
	url := o.URL("/1k")
	const clients, each = 16, 200
	var wg sync.WaitGroup
	for range clients {
		cc := p.client(t)
		wg.Go(func() {
			for range each {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rand.IntN(1500))*time.Microsecond)
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
				if resp, err := cc.RoundTrip(req); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				cancel()
			}
		})
	}
	wg.Wait()
	if resp, got := get(t, p.client(t), url, ""); resp.StatusCode != 200 || len(got) != 1024 {
		t.Fatalf("GET after the cancels: %d, %d bytes", resp.StatusCode, len(got))
	}
}
