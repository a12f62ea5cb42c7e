package tunnel

import (
	"crypto/tls"
	"net"
	"testing"
)

// wrapped is a connection wrapper that holds no bytes of its own and
// says what it reads, as intercept's client side does.
type wrapped struct{ net.Conn }

func (w wrapped) NetConn() net.Conn { return w.Conn }

// TestRecordParkerUnwraps checks that RecordParker, and TLSParker for a
// TLS connection over such a wrapper (an intercepted tunnel's, whose h2
// front-end must find its Parker), see through wrappers with a NetConn
// method to the RecordConn under them, and never through a TLS
// connection, which holds bytes of its own.
func TestRecordParkerUnwraps(t *testing.T) {
	ln := newListener(t)
	a, b := tcpPair(t, ln)
	defer a.Close()
	defer b.Close()
	rc := RecordConn(a)
	if _, ok := RecordParker(wrapped{wrapped{rc}}); !ok {
		t.Error("RecordParker of a RecordConn under two wrappers: false")
	}
	if _, ok := TLSParker(tls.Server(wrapped{rc}, &tls.Config{})); !ok {
		t.Error("TLSParker of a TLS connection over a wrapped RecordConn: false")
	}
	if _, ok := RecordParker(wrapped{tls.Server(rc, &tls.Config{})}); ok {
		t.Error("RecordParker through a TLS connection: true, want false")
	}
	if _, ok := RecordParker(wrapped{b}); ok {
		t.Error("RecordParker of a wrapped plain TCP connection: true, want false")
	}
}
