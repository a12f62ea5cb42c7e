package tlsconf

import (
	"crypto/ecdh"
	"crypto/mlkem"
	"crypto/rand"
	"crypto/tls"
	"net"
	"strings"
	"testing"
	"time"
)

// handshakePipe runs one handshake between a client with conf and a
// server with srv over a loopback TCP connection and returns the client's
// view and the server's error, else the client's.
func handshakePipe(tb testing.TB, srv, conf *tls.Config) (tls.ConnectionState, error) {
	tb.Helper()
	cc, sc := tcpPair(tb)
	defer cc.Close()
	deadline := time.Now().Add(20 * time.Second)
	cc.SetDeadline(deadline)
	sc.SetDeadline(deadline)
	errc := make(chan error, 1)
	go func() {
		defer sc.Close()
		s := tls.Server(sc, srv)
		err := s.Handshake()
		if err == nil {
			// One byte after the handshake (and, in TLS 1.3, after
			// the session ticket), then wait for the client to close.
			_, err = s.Write([]byte{'!'})
			var b [1]byte
			s.Read(b[:])
		}
		errc <- err
	}()
	c := tls.Client(cc, conf)
	err := c.Handshake()
	if err == nil {
		// The ticket (TLS 1.3), and the server's byte.
		var b [1]byte
		_, err = c.Read(b[:])
	}
	cs := c.ConnectionState()
	c.Close()
	if serr := <-errc; serr != nil {
		err = serr
	}
	return cs, err
}

// tcpPair returns the two ends of a fresh loopback TCP connection.
func tcpPair(tb testing.TB) (client, server net.Conn) {
	tb.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	if server, err = ln.Accept(); err != nil {
		client.Close()
		tb.Fatal(err)
	}
	return client, server
}

func TestKeyExchanges(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, certPEM := pairFiles(t, dir, "127.0.0.1")
	ids := func(names ...string) []tls.CurveID {
		var out []tls.CurveID
		for _, n := range names {
			id, err := ParseKeyExchange(n)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, id)
		}
		return out
	}
	tests := []struct {
		name     string
		server   []tls.CurveID // Config.KeyExchanges
		client   []tls.CurveID // the client's CurvePreferences; nil = Go's default
		version  uint16        // the client's only version; 0 = 1.2 and 1.3
		want     tls.CurveID   // 0: the handshake fails
		wantFail string
	}{
		{name: "default takes the hybrid", want: tls.X25519MLKEM768},
		{name: "default, a classical client", client: ids("X25519"), want: tls.X25519},
		{name: "X25519 first wins over the hybrid", server: ids("X25519", "X25519MLKEM768"), want: tls.X25519},
		{name: "hybrid first", server: ids("X25519MLKEM768", "X25519"), want: tls.X25519MLKEM768},
		{name: "hybrid first, a classical client", server: ids("X25519MLKEM768", "X25519"), client: ids("X25519"), want: tls.X25519},
		{name: "X25519 first, a client with only the hybrid", server: ids("X25519", "X25519MLKEM768"), client: ids("X25519MLKEM768"), want: tls.X25519MLKEM768},
		{name: "P-256 first: asked for by a retry", server: ids("CurveP256", "X25519"), want: tls.CurveP256},
		{name: "hybrid first, a TLS 1.2 client", server: ids("X25519MLKEM768", "X25519"), version: tls.VersionTLS12, want: tls.X25519},
		{name: "none in common", server: ids("X25519"), client: ids("X25519MLKEM768"), wantFail: "no key exchanges supported by both"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newManager(t, Config{Cert: certFile, Key: keyFile, KeyExchanges: tt.server})
			conf := clientConf(t, certPEM)
			conf.ServerName = "127.0.0.1"
			conf.CurvePreferences = tt.client
			if tt.version != 0 {
				conf.MinVersion, conf.MaxVersion = tt.version, tt.version
			}
			cs, err := handshakePipe(t, m.TLSConfig(), conf)
			if tt.wantFail != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantFail) {
					t.Fatalf("handshake error = %v, want one containing %q", err, tt.wantFail)
				}
				return
			}
			if err != nil {
				t.Fatalf("handshake: %v", err)
			}
			if cs.CurveID != tt.want {
				t.Errorf("key exchange %v, want %v", cs.CurveID, tt.want)
			}
		})
	}
}

func TestKeyExchangesFollowReloadAndRotation(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, certPEM := pairFiles(t, dir, "127.0.0.1")
	m := newManager(t, Config{Cert: certFile, Key: keyFile, KeyExchanges: []tls.CurveID{tls.X25519, tls.X25519MLKEM768}})
	conf := clientConf(t, certPEM)
	conf.ServerName = "127.0.0.1"
	conf.ClientSessionCache = tls.NewLRUClientSessionCache(4)
	for i, step := range []func() error{func() error { return nil }, m.Reload, m.rotateTicketKeys} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
		cs, err := handshakePipe(t, m.TLSConfig(), conf)
		if err != nil {
			t.Fatalf("handshake %d: %v", i, err)
		}
		if cs.CurveID != tls.X25519 {
			t.Errorf("handshake %d: key exchange %v, want X25519", i, cs.CurveID)
		}
		if i > 0 && !cs.DidResume {
			t.Errorf("handshake %d did not resume", i)
		}
	}
}

func TestKeyExchangesRefused(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, _ := pairFiles(t, dir, "127.0.0.1")
	tests := []struct {
		name string
		kx   []tls.CurveID
		want string
	}{
		{"empty", []tls.CurveID{}, "empty list"},
		{"twice", []tls.CurveID{tls.X25519, tls.CurveP256, tls.X25519}, "X25519 listed twice"},
		{"unknown", []tls.CurveID{tls.X25519, 0x1234}, "key exchange 1: CurveID(4660) is not one of X25519MLKEM768"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := New(Config{Cert: certFile, Key: keyFile, KeyExchanges: tt.kx})
			if err == nil {
				m.Close()
				t.Fatal("New accepted it")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestParseKeyExchange(t *testing.T) {
	for _, name := range KeyExchangeNames() {
		id, err := ParseKeyExchange(name)
		if err != nil || id.String() != name {
			t.Errorf("ParseKeyExchange(%q) = %v, %v", name, id, err)
		}
	}
	for _, name := range []string{"", "x25519", "P-256", "X25519Kyber768Draft00"} {
		if _, err := ParseKeyExchange(name); err == nil || !strings.Contains(err.Error(), "use one of X25519MLKEM768, SecP256r1MLKEM768") {
			t.Errorf("ParseKeyExchange(%q) error = %v", name, err)
		}
	}
}

// loopCPU runs f in a b.Loop and reports the process's CPU time per
// iteration besides the wall time, which a busy machine inflates (on
// Unix; elsewhere the wall time only).
func loopCPU(b *testing.B, f func()) {
	b.ReportAllocs()
	start, ok := cpuTime()
	for b.Loop() {
		f()
	}
	if end, ok2 := cpuTime(); ok && ok2 {
		b.ReportMetric(float64((end-start).Microseconds())/float64(b.N), "cpu-us/op")
	}
}

// BenchmarkHandshake measures one TLS 1.3 handshake, client and server
// together over an in-memory pipe, with each key exchange, full (an ECDSA
// P-256 signature) and resumed (a session ticket; the key exchange is
// still done, psk_dhe_ke).
func BenchmarkHandshake(b *testing.B) {
	dir := b.TempDir()
	c, k := (*issuer)(nil).issue(b, leafSpec{cn: "127.0.0.1"})
	certFile, keyFile := writeFile(b, dir, "cert.pem", c), writeFile(b, dir, "key.pem", k)
	for _, kx := range []tls.CurveID{tls.X25519MLKEM768, tls.X25519} {
		for _, resume := range []bool{false, true} {
			name := kx.String() + "/full"
			if resume {
				name = kx.String() + "/resumed"
			}
			b.Run(name, func(b *testing.B) {
				m, err := New(Config{Cert: certFile, Key: keyFile, KeyExchanges: []tls.CurveID{kx}})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { m.Close() })
				conf := clientConf(b, c)
				conf.ServerName = "127.0.0.1"
				if resume {
					conf.ClientSessionCache = tls.NewLRUClientSessionCache(4)
					if _, err := handshakePipe(b, m.TLSConfig(), conf); err != nil {
						b.Fatal(err)
					}
				}
				loopCPU(b, func() {
					cs, err := handshakePipe(b, m.TLSConfig(), conf)
					if err != nil {
						b.Fatal(err)
					}
					if cs.DidResume != resume || cs.CurveID != kx {
						b.Fatalf("resumed %v with %v", cs.DidResume, cs.CurveID)
					}
				})
			})
		}
	}
}

// BenchmarkServerKeyExchange measures what a TLS 1.3 server computes for
// the key exchange of one handshake, alone: for X25519 a key pair and the
// shared secret with the client's share; for X25519MLKEM768 that, plus
// parsing the client's ML-KEM-768 encapsulation key and encapsulating to
// it.
func BenchmarkServerKeyExchange(b *testing.B) {
	peer, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	dk, err := mlkem.GenerateKey768()
	if err != nil {
		b.Fatal(err)
	}
	ekBytes := dk.EncapsulationKey().Bytes()
	x25519 := func(b *testing.B) {
		k, err := ecdh.X25519().GenerateKey(rand.Reader)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := k.ECDH(peer.PublicKey()); err != nil {
			b.Fatal(err)
		}
	}
	mlkem768 := func(b *testing.B) {
		ek, err := mlkem.NewEncapsulationKey768(ekBytes)
		if err != nil {
			b.Fatal(err)
		}
		ek.Encapsulate()
	}
	b.Run("X25519", func(b *testing.B) { loopCPU(b, func() { x25519(b) }) })
	b.Run("MLKEM768", func(b *testing.B) { loopCPU(b, func() { mlkem768(b) }) })
	b.Run("X25519MLKEM768", func(b *testing.B) { loopCPU(b, func() { x25519(b); mlkem768(b) }) })
}
