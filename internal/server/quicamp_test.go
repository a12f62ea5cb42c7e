package server

import (
	"context"
	"crypto/tls"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// quicListener configures one https listener with HTTP/3 on, for the QUIC
// admission tests: quic_handshake 2 s (given up after 1 s without a
// packet from the client).
func quicListener(t *testing.T) func(c *config.Config) {
	tl, _ := proxyCerts(t)
	return func(c *config.Config) {
		c.Listen = []config.Listener{{Name: "tls", Address: "127.0.0.1:0", Protocol: "https", TLS: tl, HTTP3: true}}
		c.Timeouts.QUICHandshake.Duration = 2 * time.Second
	}
}

// TestQUICAmplification checks the bound docs/operations.md states on
// what rustle sends an address it has not validated (RFC 9000 §8.1): a
// client that sends its ClientHello and then nothing gets at most three
// times what it sent plus one datagram of under 1,280 bytes, counted
// over the whole handshake timeout, retransmissions included; with
// http3.retry_threshold = -1 it gets a Retry only, less than it sent.
func TestQUICAmplification(t *testing.T) {
	for _, tt := range []struct {
		name  string
		retry int // http3.retry_threshold
	}{
		{"handshake", 1000},
		{"retry always", -1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			setup := quicListener(t)
			s, addrs, _ := startConfigured(t, func(c *config.Config) {
				setup(c)
				c.HTTP3.RetryThreshold = tt.retry
			})
			c := newSilentConn(t, "127.0.0.2:0")
			c.muteOnAnswer = true // the client sends its first flight and nothing more
			floodInitials(t, c, addrs[0], 1)
			waitCounts(t, c, "an answer", func(_, answered, _, _ int) bool { return answered >= 1 })
			// The server retransmits its flight until it gives the
			// handshake up (1 s without a packet from the client): what
			// it sent until then is counted.
			s.mu.Lock()
			q := s.gen.listeners[0].quic
			s.mu.Unlock()
			proxytest.WaitFor(t, "the half-open handshake given up", func() bool { return q.hs.inProgress() == 0 })
			_, _, handshook, retried, sent, received := c.counts()
			t.Logf("sent %d bytes, received %d (%d handshakes, %d Retries)", sent, received, handshook, retried)
			switch {
			case tt.retry < 0 && (retried != 1 || handshook != 0 || received >= sent):
				t.Errorf("retry_threshold -1: %d handshakes, %d Retries, %d bytes back for %d sent; want a Retry only, fewer bytes than sent",
					handshook, retried, received, sent)
			case tt.retry >= 0 && (handshook != 1 || received > 3*sent+1280):
				t.Errorf("%d handshakes, %d bytes back for %d sent; want 1 handshake and at most 3 × %d + 1,280 = %d bytes",
					handshook, received, sent, sent, 3*sent+1280)
			}
		})
	}
}

// TestQUICAdmittedBeforeHandshake checks that a QUIC connection is
// admitted before its TLS handshake: past limits.connection_rate from
// one address, the Initials are refused without a handshake (no
// Handshake packet is sent for them).
func TestQUICAdmittedBeforeHandshake(t *testing.T) {
	setup := quicListener(t)
	_, addrs, _ := startConfigured(t, func(c *config.Config) {
		setup(c)
		c.Limits.ConnectionRate = 1
		c.Limits.ConnectionBurst = 2
		c.HTTP3.RetryThreshold = 1000 // no Retry: every admitted connection's handshake runs
	})
	const n = 10
	c := newSilentConn(t, "127.0.0.2:0")
	floodInitials(t, c, addrs[0], n)
	// Under load a datagram of the exchange can be lost (the flood sends
	// each Initial once): 9 of 10 were answered once. The answers to half
	// show what the listener does with the rest.
	waitCounts(t, c, "an answer to half the connections", func(_, answered, _, _ int) bool { return answered >= n/2 })
	c.mute()
	_, _, handshook, retried, _, _ := c.counts()
	// The burst (2), and one more for each second the flood took.
	if handshook > 3 || retried != 0 {
		t.Errorf("%d Initials from one address at connection_rate 1, burst 2: %d TLS handshakes run, %d Retries; want at most 3 handshakes, the rest refused before it",
			n, handshook, retried)
	}
}

// TestQUICManyFromOneAddress checks that a client that proved its address
// is not refused for opening many connections at once: the per-address
// share of limits.max_tls_handshakes keeps unvalidated floods from taking
// every slot, and a validated client past it takes a slot of all while
// half of them are free, as a TCP client waits for one. Before, 3 of 64
// connections of the benchmark's HTTP/3 load were refused with
// CONNECTION_REFUSED.
func TestQUICManyFromOneAddress(t *testing.T) {
	tl, roots := proxyCerts(t)
	_, addrs, logs := startConfigured(t, func(c *config.Config) {
		c.Listen = []config.Listener{{Name: "tls", Address: "127.0.0.1:0", Protocol: "https", TLS: tl, HTTP3: true}}
		c.Limits.MaxTLSHandshakes = 32 // 4 per address, Retry past 1 unvalidated from one address
	})
	const n = 12
	var wg sync.WaitGroup
	errs := make(chan error, n)
	start := make(chan struct{})
	for range n {
		wg.Go(func() {
			<-start
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			qc, err := quic.DialAddr(ctx, addrs[0], &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", NextProtos: []string{"h3"}}, nil)
			if err != nil {
				errs <- err
				return
			}
			qc.CloseWithError(0, "")
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	var refused []error
	for err := range errs {
		refused = append(refused, err)
	}
	if len(refused) > 0 {
		t.Errorf("%d of %d QUIC connections opened at once from one address failed (max_tls_handshakes 32): %v", len(refused), n, refused)
		t.Log(logs.String())
	}
}
