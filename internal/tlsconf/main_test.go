package tlsconf

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/leaktest"
)

func TestMain(m *testing.M) {
	os.Exit(leaktest.Main(m, 5*time.Second, "tlsconf.(*Manager).rotateLoop", "tlsconf.(*testServer)"))
}

// issuer signs test certificates; a nil *issuer makes self-signed ones.
type issuer struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

// newCA returns a fresh test CA.
func newCA(t testing.TB, cn string) *issuer {
	t.Helper()
	key := genKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &issuer{cert: cert, key: key, pem: pemBlock("CERTIFICATE", der)}
}

func genKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// leafSpec describes a test leaf certificate.
type leafSpec struct {
	cn       string
	client   bool      // client auth rather than server auth
	notAfter time.Time // zero: an hour from now
}

// issue returns a PEM certificate and PKCS #8 key for spec, signed by ca
// (self-signed when ca is nil).
func (ca *issuer) issue(t testing.TB, spec leafSpec) (certPEM, keyPEM []byte) {
	t.Helper()
	key := genKey(t)
	notAfter := spec.notAfter
	if notAfter.IsZero() {
		notAfter = time.Now().Add(time.Hour)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: spec.cn},
		NotBefore:    time.Now().Add(-2 * time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	if spec.client {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		tmpl.IPAddresses = nil
	}
	parent, signer := tmpl, key
	if ca != nil {
		parent, signer = ca.cert, ca.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pemBlock("CERTIFICATE", der), pemBlock("PRIVATE KEY", kder)
}

// writeFile writes b to name in dir and returns the path.
func writeFile(t testing.TB, dir, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// pairFiles writes a self-signed server pair for cn to dir as cert.pem and
// key.pem (replacing earlier ones) and returns the paths and the
// certificate's PEM.
func pairFiles(t *testing.T, dir, cn string) (certFile, keyFile string, certPEM []byte) {
	t.Helper()
	c, k := (*issuer)(nil).issue(t, leafSpec{cn: cn})
	return writeFile(t, dir, "cert.pem", c), writeFile(t, dir, "key.pem", k), c
}

// newManager returns a Manager closed at the end of the test.
func newManager(t *testing.T, cfg Config) *Manager {
	t.Helper()
	m, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// testServer accepts TLS connections with a Manager's config. After each
// handshake it writes one greeting line, "<client cert user> <ok>\n", then
// echoes what it reads.
type testServer struct {
	ln   net.Listener
	conf *tls.Config
	wg   sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]bool // guarded by mu
}

// serve starts a testServer on network ("tcp4" or "tcp6") loopback.
func serve(t *testing.T, conf *tls.Config, network string) *testServer {
	t.Helper()
	addr := "127.0.0.1:0"
	if network == "tcp6" {
		addr = "[::1]:0"
	}
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	s := &testServer{ln: ln, conf: conf, conns: make(map[net.Conn]bool)}
	s.wg.Add(1)
	go s.acceptLoop()
	t.Cleanup(s.close)
	return s
}

func (s *testServer) addr() string { return s.ln.Addr().String() }

func (s *testServer) acceptLoop() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns[c] = true
		s.mu.Unlock()
		s.wg.Add(1)
		go s.handle(c)
	}
}

func (s *testServer) handle(c net.Conn) {
	defer s.wg.Done()
	defer c.Close()
	tc := tls.Server(c, s.conf)
	tc.SetDeadline(time.Now().Add(20 * time.Second))
	if err := tc.Handshake(); err != nil {
		return
	}
	user, ok := ClientCertUser(tc.ConnectionState())
	if _, err := fmt.Fprintf(tc, "%s %v\n", user, ok); err != nil {
		return
	}
	io.Copy(tc, tc)
}

func (s *testServer) close() {
	s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// session is one client connection to a testServer.
type session struct {
	conn  *tls.Conn
	r     *bufio.Reader
	greet string // the server's greeting line, without the newline
}

// dial connects to addr with conf, completes the handshake and reads the
// greeting. The connection is closed at the end of the test.
func dial(t *testing.T, addr string, conf *tls.Config) (*session, error) {
	t.Helper()
	d := &net.Dialer{Timeout: 10 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", addr, conf)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(20 * time.Second))
	s := &session{conn: c, r: bufio.NewReader(c)}
	line, err := s.r.ReadString('\n')
	if err != nil {
		return nil, fmt.Errorf("read greeting: %w", err)
	}
	s.greet = strings.TrimSuffix(line, "\n")
	return s, nil
}

// mustDial is dial failing the test on error.
func mustDial(t *testing.T, addr string, conf *tls.Config) *session {
	t.Helper()
	s, err := dial(t, addr, conf)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	return s
}

// echo checks that the connection still carries bytes both ways.
func (s *session) echo(t *testing.T, msg string) {
	t.Helper()
	if _, err := io.WriteString(s.conn, msg+"\n"); err != nil {
		t.Fatalf("write: %v", err)
	}
	got, err := s.r.ReadString('\n')
	if err != nil {
		t.Fatalf("read echo: %v", err)
	}
	if got != msg+"\n" {
		t.Fatalf("echo = %q, want %q", got, msg+"\n")
	}
}

// peerCN returns the common name of the certificate the server presented.
func (s *session) peerCN() string {
	return s.conn.ConnectionState().PeerCertificates[0].Subject.CommonName
}

// clientConf trusts the certificates in caPEM.
func clientConf(t testing.TB, caPEM ...[]byte) *tls.Config {
	t.Helper()
	pool := x509.NewCertPool()
	for _, p := range caPEM {
		if !pool.AppendCertsFromPEM(p) {
			t.Fatal("bad CA PEM")
		}
	}
	return &tls.Config{RootCAs: pool}
}
