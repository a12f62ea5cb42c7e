package server

import (
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// TestQUICWarningsFlushed checks that the admission's warnings, at most
// one per quicWarnEvery, lose nothing: what is counted after a warning is
// logged when the interval ends, though nothing else is counted then, and
// what is counted after that is logged by stop.
func TestQUICWarningsFlushed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf proxytest.LogBuffer
		var h quicHandshakes
		h.init(slog.New(slog.NewTextHandler(&buf, nil)))
		count := func(want int) {
			t.Helper()
			if got := strings.Count(buf.String(), "QUIC connections refused before the handshake"); got != want {
				t.Fatalf("%d warnings, want %d; log:\n%s", got, want, buf.String())
			}
		}
		h.refuse("too many TLS handshakes in progress") // warned at once
		count(1)
		for range 5 {
			h.refuse("too many TLS handshakes in progress")
		}
		time.Sleep(quicWarnEvery / 2)
		count(1) // within the interval
		time.Sleep(quicWarnEvery / 2)
		synctest.Wait()
		count(2)
		if !strings.Contains(buf.String(), "refused=5") {
			t.Errorf("the flushed warning does not count the 5 refusals after the first; log:\n%s", buf.String())
		}
		h.refuse("too many QUIC connections on the listener") // within the next interval
		h.stop()
		h.stop()
		count(3)
		if !strings.Contains(buf.String(), `reason="too many QUIC connections on the listener" refused=1`) {
			t.Errorf("stop did not log the refusal counted before it; log:\n%s", buf.String())
		}
		time.Sleep(2 * quicWarnEvery)
		synctest.Wait()
		count(3) // no flush after stop
	})
}
