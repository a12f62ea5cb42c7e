package proxytest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"sync"
	"testing"
	"time"
)

// EchoServer is a loopback TCP server that writes back every byte it
// reads and, on the client's end of stream, ends its own (a half-close),
// in plain TCP or inside TLS. Create one with NewEcho or NewTLSEcho.
type EchoServer struct {
	// Addr is its IPv4 loopback address ("127.0.0.1:port").
	Addr string
	// Addr6 is its IPv6 loopback address ("[::1]:port"), or "" when the
	// host has no IPv6 loopback.
	Addr6 string

	tlsConfig *tls.Config // nil for plain TCP
	roots     *x509.CertPool
	lns       []net.Listener
	wg        sync.WaitGroup

	mu       sync.Mutex
	conns    map[net.Conn]bool // guarded by mu
	accepted int               // guarded by mu
	closed   bool              // guarded by mu
}

// NewEcho starts a plain TCP echo server, closed by t.Cleanup.
func NewEcho(t testing.TB) *EchoServer {
	t.Helper()
	return startEcho(t, nil, nil)
}

// NewTLSEcho starts a TLS echo server with a freshly generated
// self-signed certificate for localhost, 127.0.0.1 and ::1, closed by
// t.Cleanup. ClientConfig returns a configuration that trusts it.
func NewTLSEcho(t testing.TB) *EchoServer {
	t.Helper()
	cert, roots := selfSigned(t)
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	return startEcho(t, cfg, roots)
}

func startEcho(t testing.TB, cfg *tls.Config, roots *x509.CertPool) *EchoServer {
	t.Helper()
	e := &EchoServer{tlsConfig: cfg, roots: roots, conns: map[net.Conn]bool{}}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxytest: echo listen: %v", err)
	}
	e.lns = append(e.lns, ln)
	e.Addr = ln.Addr().String()
	if IPv6Loopback() {
		if ln6, err := net.Listen("tcp6", "[::1]:0"); err == nil {
			e.lns = append(e.lns, ln6)
			e.Addr6 = ln6.Addr().String()
		}
	}
	for _, ln := range e.lns {
		e.wg.Add(1)
		go e.acceptLoop(ln)
	}
	t.Cleanup(e.Close)
	return e
}

// ClientConfig returns a TLS client configuration that trusts the
// server's certificate, with ServerName "localhost". It is nil for a
// plain echo server.
func (e *EchoServer) ClientConfig() *tls.Config {
	if e.roots == nil {
		return nil
	}
	return &tls.Config{RootCAs: e.roots, ServerName: "localhost", MinVersion: tls.VersionTLS12}
}

// Conns returns how many connections the server has accepted.
func (e *EchoServer) Conns() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.accepted
}

// Close stops the server, closing every connection, and waits for its
// goroutines. It is idempotent.
func (e *EchoServer) Close() {
	e.mu.Lock()
	if !e.closed {
		e.closed = true
		for _, ln := range e.lns {
			ln.Close()
		}
		for c := range e.conns {
			c.Close()
		}
	}
	e.mu.Unlock()
	e.wg.Wait()
}

func (e *EchoServer) acceptLoop(ln net.Listener) {
	defer e.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		e.mu.Lock()
		if e.closed {
			e.mu.Unlock()
			c.Close()
			return
		}
		e.accepted++
		e.conns[c] = true
		e.wg.Add(1)
		e.mu.Unlock()
		go e.serveConn(c)
	}
}

// serveConn echoes one connection until the client's end of stream, then
// half-closes and waits for the client to close.
func (e *EchoServer) serveConn(c net.Conn) {
	defer e.wg.Done()
	defer func() {
		c.Close()
		e.mu.Lock()
		delete(e.conns, c)
		e.mu.Unlock()
	}()
	rw := io.ReadWriter(c)
	closeWrite := func() { c.(*net.TCPConn).CloseWrite() }
	if e.tlsConfig != nil {
		tc := tls.Server(c, e.tlsConfig)
		c.SetDeadline(time.Now().Add(DefaultTimeout))
		if err := tc.Handshake(); err != nil {
			return
		}
		c.SetDeadline(time.Time{})
		rw = tc
		closeWrite = func() { tc.CloseWrite() }
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := rw.Read(buf)
		if n > 0 {
			if _, werr := rw.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			break
		}
	}
	closeWrite()
	io.Copy(io.Discard, c) // until the client closes or Close
}

// selfSigned generates an ECDSA certificate for localhost and the
// loopback addresses and a pool that trusts it.
func selfSigned(t testing.TB) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	return SelfSignedFor(t, "localhost")
}

// SelfSignedFor returns an ECDSA certificate, its own CA, for the names
// and the loopback addresses, and a pool that trusts it (its PEM is
// CertPEM of the certificate's Leaf).
func SelfSignedFor(t testing.TB, names ...string) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("proxytest: generate key: %v", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "proxytest"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		DNSNames:              names,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("proxytest: create certificate: %v", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("proxytest: parse certificate: %v", err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, roots
}

// SelfSigned returns an ECDSA certificate for localhost and the loopback
// addresses, and a pool that trusts it.
func SelfSigned(t testing.TB) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	return selfSigned(t)
}

// CertPEM returns c's DER certificate in PEM, for a client that reads a
// CA file (curl --cacert, Python's cafile).
func CertPEM(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}
