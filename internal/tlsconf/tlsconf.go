package tlsconf

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultTicketRotation is the session ticket key rotation period used
// when Config.TicketRotation is zero.
const DefaultTicketRotation = time.Hour

// ticketKeysKept is how many ticket keys decrypt tickets: the current one
// and the two previous ones.
const ticketKeysKept = 3

// Config configures a Manager.
type Config struct {
	// Cert is the PEM file holding the server certificate, optionally
	// followed by intermediate certificates. Required.
	Cert string
	// Key is the PEM file holding the certificate's private key (PKCS #1,
	// PKCS #8 or SEC 1). Required.
	Key string
	// ClientCA is a PEM bundle of CA certificates that sign client
	// certificates. When set, clients may present a certificate and a
	// presented one must verify against this bundle (see ClientCertUser);
	// "" means client certificates are neither requested nor verified.
	ClientCA string
	// KTLS asks for kernel TLS offload, which this build does not
	// implement: New refuses it. false (the zero value) means user-space
	// TLS.
	KTLS bool
	// NextProtos lists the ALPN protocols offered, most preferred first;
	// nil means []string{"http/1.1"}.
	NextProtos []string
	// TicketRotation is how often a new session ticket key is made; the
	// current key and the two previous ones are kept. 0 means
	// DefaultTicketRotation (1h).
	TicketRotation time.Duration
	// KeyExchanges lists the key exchanges offered to clients, most
	// preferred first: a handshake uses the first one the client
	// supports, even where the client sent a key share only for a later
	// one (it is then asked for another: a HelloRetryRequest, one more
	// round trip); a client supporting none fails the handshake. nil
	// means crypto/tls's default: the hybrid post-quantum X25519MLKEM768
	// (then SecP256r1MLKEM768, SecP384r1MLKEM1024) whenever the client
	// supports it, else the classical ones, preferring one the client
	// sent a key share for. See [KeyExchangeNames].
	KeyExchanges []tls.CurveID
	// Logger receives warnings (an expired certificate) and reload notes;
	// nil discards them.
	Logger *slog.Logger
}

// material is one loaded certificate, key and client CA bundle.
type material struct {
	cert *tls.Certificate
	// conf is what GetConfigForClient returns for handshakes started while
	// this material is current: it carries the client CA pool and the
	// ticket keys (installed by the Manager under its mu). With
	// Config.KeyExchanges its CurvePreferences are those, for a client
	// that supports none of them.
	conf *tls.Config
	// kex holds, with Config.KeyExchanges, a copy of conf for each of
	// them, in that order, offering only that one.
	kex []*tls.Config
}

// Manager serves a certificate to tls.Server, reloads it, and rotates
// session ticket keys. Its methods may be called from any goroutine.
type Manager struct {
	cfg      Config // immutable after New
	log      *slog.Logger
	rotation time.Duration
	base     *tls.Config // what TLSConfig returns; immutable after New
	cur      atomic.Pointer[material]

	mu   sync.Mutex   // serializes Reload and ticket key changes
	keys [][32]byte   // guarded by mu; current key first
	gen  atomic.Int64 // number of ticket key rotations so far

	stop      chan struct{} // closed by Close
	done      chan struct{} // closed when rotateLoop returns
	closeOnce sync.Once
}

// New loads cfg's certificate and key (and client CA bundle, if any),
// checks them, and starts the goroutine that rotates session ticket keys.
// Call Close to stop it. An expired or not yet valid certificate is logged
// as a warning, not refused.
func New(cfg Config) (*Manager, error) {
	if cfg.KTLS {
		return nil, ktlsError()
	}
	if cfg.Cert == "" || cfg.Key == "" {
		return nil, errors.New("tlsconf: both a certificate file and a key file are required")
	}
	if cfg.TicketRotation < 0 {
		return nil, fmt.Errorf("tlsconf: negative ticket rotation %v", cfg.TicketRotation)
	}
	if err := checkKeyExchanges(cfg.KeyExchanges); err != nil {
		return nil, err
	}
	m := &Manager{
		cfg:      cfg,
		log:      cfg.Logger,
		rotation: cfg.TicketRotation,
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	if m.rotation == 0 {
		m.rotation = DefaultTicketRotation
	}
	m.cfg.KeyExchanges = slices.Clone(cfg.KeyExchanges)
	if m.cfg.NextProtos == nil {
		m.cfg.NextProtos = []string{"http/1.1"}
	}
	m.base = m.newConfig(nil)
	m.base.GetConfigForClient = m.configForClient

	mat, err := m.load()
	if err != nil {
		return nil, err
	}
	key, err := newTicketKey()
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	m.keys = [][32]byte{key}
	m.installLocked(mat)
	m.mu.Unlock()

	go m.rotateLoop()
	return m, nil
}

// TLSConfig returns the configuration to pass to tls.Server: TLS 1.2 and
// 1.3, the configured ALPN protocols, the current certificate, rotating
// session tickets and, with Config.ClientCA, optional client certificate
// verification. Every call returns the same *tls.Config; do not modify it.
// Its GetConfigForClient hands each handshake the Manager's current
// settings, so a Clone keeps following reloads and key rotations.
func (m *Manager) TLSConfig() *tls.Config { return m.base }

// Reload reads the certificate, key and client CA files again and, if they
// load and match, uses them for new handshakes. Established connections are
// not affected. On error the previous material stays in use.
func (m *Manager) Reload() error {
	mat, err := m.load()
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.installLocked(mat)
	m.mu.Unlock()
	m.log.Info("tlsconf: reloaded certificate", "cert", m.cfg.Cert,
		"subject", mat.cert.Leaf.Subject.String(), "not_after", mat.cert.Leaf.NotAfter)
	return nil
}

// Close stops ticket key rotation. Configurations already handed out keep
// working with the last keys. Close is idempotent and always returns nil.
func (m *Manager) Close() error {
	m.closeOnce.Do(func() { close(m.stop) })
	<-m.done
	return nil
}

// ClientCertUser returns the common name of the client certificate that
// crypto/tls verified for cs, and whether there was one. It reports false
// when the client presented no certificate, when verification was not
// asked for, and when the verified certificate has an empty common name.
func ClientCertUser(cs tls.ConnectionState) (string, bool) {
	if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return "", false
	}
	cn := cs.VerifiedChains[0][0].Subject.CommonName
	return cn, cn != ""
}

// newConfig returns a server config with the Manager's fixed settings and
// the client CA pool cas (nil: no client certificates).
func (m *Manager) newConfig(cas *x509.CertPool) *tls.Config {
	c := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		NextProtos:     m.cfg.NextProtos,
		GetCertificate: m.getCertificate,
	}
	if cas != nil {
		c.ClientAuth = tls.VerifyClientCertIfGiven
		c.ClientCAs = cas
	}
	return c
}

// getCertificate is the GetCertificate hook: the current certificate,
// whatever the client asked for.
func (m *Manager) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return m.cur.Load().cert, nil
}

// configForClient is the GetConfigForClient hook of the base config.
// With Config.KeyExchanges it returns the config offering only the first
// of them that the client supports: crypto/tls itself ignores the order
// of CurvePreferences and takes a post-quantum hybrid whenever both sides
// have one.
func (m *Manager) configForClient(hi *tls.ClientHelloInfo) (*tls.Config, error) {
	mat := m.cur.Load()
	if mat.kex != nil {
		if i := pickKeyExchange(m.cfg.KeyExchanges, hi); i >= 0 {
			return mat.kex[i], nil
		}
	}
	return mat.conf, nil
}

// installLocked makes mat current, giving its config the current ticket
// keys. m.mu must be held.
func (m *Manager) installLocked(mat *material) {
	mat.conf.SetSessionTicketKeys(m.keys)
	for _, c := range mat.kex {
		c.SetSessionTicketKeys(m.keys)
	}
	m.base.SetSessionTicketKeys(m.keys)
	m.cur.Store(mat)
}

// load reads and checks the configured files.
func (m *Manager) load() (*material, error) {
	certPEM, err := readFile("certificate", m.cfg.Cert)
	if err != nil {
		return nil, err
	}
	keyPEM, err := readFile("key", m.cfg.Key)
	if err != nil {
		return nil, err
	}
	cert, err := parsePair(certPEM, keyPEM, m.cfg.Cert, m.cfg.Key)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	if now.After(cert.Leaf.NotAfter) {
		m.log.Warn("tlsconf: certificate has expired; clients will refuse it",
			"cert", m.cfg.Cert, "not_after", cert.Leaf.NotAfter)
	} else if now.Before(cert.Leaf.NotBefore) {
		m.log.Warn("tlsconf: certificate is not valid yet; clients will refuse it",
			"cert", m.cfg.Cert, "not_before", cert.Leaf.NotBefore)
	}
	var cas *x509.CertPool
	if m.cfg.ClientCA != "" {
		caPEM, err := readFile("client CA bundle", m.cfg.ClientCA)
		if err != nil {
			return nil, err
		}
		if cas, err = parseCAs(caPEM, m.cfg.ClientCA); err != nil {
			return nil, err
		}
	}
	mat := &material{cert: cert, conf: m.newConfig(cas)}
	if kx := m.cfg.KeyExchanges; kx != nil {
		mat.conf.CurvePreferences = kx
		mat.kex = make([]*tls.Config, len(kx))
		for i := range kx {
			mat.kex[i] = m.newConfig(cas)
			mat.kex[i].CurvePreferences = kx[i : i+1]
		}
	}
	return mat, nil
}

// readFile reads a PEM file, naming what it is for in errors.
func readFile(what, name string) ([]byte, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("tlsconf: read %s: %w", what, err)
	}
	return b, nil
}

// parsePair parses a PEM certificate chain and private key and checks that
// they belong together. certFile and keyFile name them in errors. The
// returned certificate has Leaf set.
func parsePair(certPEM, keyPEM []byte, certFile, keyFile string) (*tls.Certificate, error) {
	certBlocks, certOther := pemTypes(certPEM)
	keyBlocks, keyOther := pemTypes(keyPEM)
	switch {
	case certBlocks["CERTIFICATE"] == 0 && hasKey(certBlocks):
		return nil, fmt.Errorf("tlsconf: certificate %s holds a private key, not a certificate (are cert and key swapped?)", certFile)
	case certBlocks["CERTIFICATE"] == 0:
		return nil, fmt.Errorf("tlsconf: certificate %s: no PEM CERTIFICATE block%s", certFile, certOther)
	case !hasKey(keyBlocks) && keyBlocks["CERTIFICATE"] > 0:
		return nil, fmt.Errorf("tlsconf: key %s holds a certificate, not a private key (are cert and key swapped?)", keyFile)
	case !hasKey(keyBlocks):
		return nil, fmt.Errorf("tlsconf: key %s: no PEM PRIVATE KEY block%s", keyFile, keyOther)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("tlsconf: certificate %s with key %s: %w", certFile, keyFile, err)
	}
	if cert.Leaf == nil {
		// X509KeyPair sets Leaf unless GODEBUG=x509keypairleaf=0.
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("tlsconf: certificate %s: %w", certFile, err)
		}
	}
	return &cert, nil
}

// pemTypes counts the PEM blocks of b by type. other describes what b
// holds when it has no PEM block at all, for error messages.
func pemTypes(b []byte) (types map[string]int, other string) {
	types = make(map[string]int)
	rest := b
	for {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		types[blk.Type]++
	}
	if len(types) == 0 {
		switch {
		case len(bytes.TrimSpace(b)) == 0:
			other = " (the file is empty)"
		case bytes.Contains(b, []byte("-----BEGIN")):
			other = " (a PEM block is malformed)"
		default:
			other = " (the file is not PEM; DER files must be converted)"
		}
	}
	return types, other
}

// hasKey reports whether types includes a private key block.
func hasKey(types map[string]int) bool {
	for t := range types {
		if strings.HasSuffix(t, "PRIVATE KEY") {
			return true
		}
	}
	return false
}

// parseCAs parses a PEM CA bundle; name names it in errors.
func parseCAs(b []byte, name string) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	n := 0
	for rest := b; ; {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("tlsconf: client CA bundle %s: certificate %d: %w", name, n+1, err)
		}
		pool.AddCert(c)
		n++
	}
	if n == 0 {
		_, other := pemTypes(b)
		return nil, fmt.Errorf("tlsconf: client CA bundle %s: no PEM CERTIFICATE block%s", name, other)
	}
	return pool, nil
}
