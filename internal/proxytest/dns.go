package proxytest

import (
	"crypto/tls"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// DNSServer is an authoritative-looking DNS server for tests, written
// with dnsmessage: it answers the A, AAAA and CNAME records set with Set
// and SetCNAME, NXDOMAIN (with an SOA whose negative TTL is NegTTL) for
// other names, over UDP, TCP, DNS over TLS and DNS over HTTPS on loopback
// ports. It counts the questions it is asked per name. SetMode makes it
// drop every query (a resolver that times out), answer SERVFAIL, or
// truncate UDP answers.
type DNSServer struct {
	// UDP and TCP are host:port of plain DNS (the same port); TLS of DNS over TLS (its
	// certificate is for 127.0.0.1); HTTPS is the DNS over HTTPS URL.
	UDP, TCP, TLS, HTTPS string
	// CAFile is a PEM file of the certificate the TLS and HTTPS servers
	// present; ClientTLS is a client configuration that trusts it.
	CAFile    string
	ClientTLS *tls.Config

	mu      sync.Mutex
	records map[dnsKey][]dnsRecord // guarded by mu
	anyA    []dnsRecord            // the A answer of every name not set (SetAny); guarded by mu
	asked   map[string]int         // questions by lower-case name; guarded by mu
	mode    DNSMode                // guarded by mu
	negTTL  uint32                 // guarded by mu
	closed  bool                   // guarded by mu
	hold    chan struct{}          // answers wait until it is closed; nil = none; guarded by mu

	closers []io.Closer // guarded by mu once serving
	wg      sync.WaitGroup
}

type dnsKey struct {
	name string // lower case, with the trailing dot
	t    dnsmessage.Type
}

type dnsRecord struct {
	ttl   uint32
	addr  netip.Addr
	cname string
}

// DNSMode is how a DNSServer answers.
type DNSMode int

// Modes of a DNSServer.
const (
	// DNSAnswer answers normally.
	DNSAnswer DNSMode = iota
	// DNSDrop answers nothing (the client times out).
	DNSDrop
	// DNSServFail answers SERVFAIL.
	DNSServFail
	// DNSTruncate sets TC on UDP answers, with no records (TCP answers
	// normally).
	DNSTruncate
)

// NewDNSServer starts a DNSServer on 127.0.0.1; t.Cleanup stops it.
func NewDNSServer(t testing.TB) *DNSServer {
	t.Helper()
	s := &DNSServer{records: make(map[dnsKey][]dnsRecord), asked: make(map[string]int), negTTL: 60}
	cert, roots := selfSigned(t)
	s.ClientTLS = &tls.Config{RootCAs: roots}
	s.CAFile = filepath.Join(t.TempDir(), "dns-ca.pem")
	if err := os.WriteFile(s.CAFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}), 0o600); err != nil {
		t.Fatalf("proxytest: write DNS CA: %v", err)
	}
	// UDP and TCP share a port, as a DNS server's do: a truncated UDP
	// answer is asked again over TCP at the same address.
	var pc net.PacketConn
	var tcp net.Listener
	for try := 0; ; try++ {
		p, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("proxytest: DNS listen udp: %v", err)
		}
		ln, err := net.Listen("tcp", p.LocalAddr().String())
		if err == nil {
			pc, tcp = p, ln
			break
		}
		p.Close()
		if try == 20 {
			t.Fatalf("proxytest: DNS listen tcp on the UDP port: %v", err)
		}
	}
	s.closers = append(s.closers, pc, tcp)
	s.UDP = pc.LocalAddr().String()
	s.TCP = tcp.Addr().String()
	tlsLn := tls.NewListener(s.listen(t), &tls.Config{Certificates: []tls.Certificate{cert}})
	s.TLS = tlsLn.Addr().String()
	httpsLn := s.listen(t)
	s.HTTPS = "https://" + httpsLn.Addr().String() + "/dns-query"
	hs := &http.Server{ErrorLog: log.New(io.Discard, "", 0), Handler: http.HandlerFunc(s.serveHTTP), TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}}
	s.closers = append(s.closers, hs)

	s.wg.Add(4)
	go func() { defer s.wg.Done(); s.serveUDP(pc) }()
	go func() { defer s.wg.Done(); s.serveStream(tcp) }()
	go func() { defer s.wg.Done(); s.serveStream(tlsLn) }()
	go func() { defer s.wg.Done(); hs.ServeTLS(httpsLn, "", "") }()
	t.Cleanup(func() {
		s.mu.Lock()
		closers := s.closers
		s.closers, s.closed = nil, true
		if s.hold != nil {
			close(s.hold)
			s.hold = nil
		}
		s.mu.Unlock()
		for _, c := range closers {
			c.Close()
		}
		s.wg.Wait()
	})
	return s
}

func (s *DNSServer) listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxytest: DNS listen tcp: %v", err)
	}
	s.closers = append(s.closers, ln)
	return ln
}

// Set makes name answer addrs (A for IPv4, AAAA for IPv6) with ttl,
// replacing what name answered; no addrs removes the name.
func (s *DNSServer) Set(name string, ttl uint32, addrs ...string) {
	n := fqdn(name)
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.records, dnsKey{n, dnsmessage.TypeA})
	delete(s.records, dnsKey{n, dnsmessage.TypeAAAA})
	delete(s.records, dnsKey{n, dnsmessage.TypeCNAME})
	for _, a := range addrs {
		ip := netip.MustParseAddr(a)
		t := dnsmessage.TypeAAAA
		if ip.Is4() {
			t = dnsmessage.TypeA
		}
		k := dnsKey{n, t}
		s.records[k] = append(s.records[k], dnsRecord{ttl: ttl, addr: ip})
	}
}

// SetCNAME makes name an alias of target with ttl.
func (s *DNSServer) SetCNAME(name string, ttl uint32, target string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.records[dnsKey{fqdn(name), dnsmessage.TypeCNAME}] = []dnsRecord{{ttl: ttl, cname: fqdn(target)}}
}

// SetAny makes the server answer the A query of every name not set
// with addr (IPv4), TTL ttl.
func (s *DNSServer) SetAny(ttl uint32, addr netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.anyA = []dnsRecord{{ttl: ttl, addr: addr}}
}

// SetNegativeTTL sets the SOA MINIMUM (and TTL) of NXDOMAIN and NODATA
// answers.
func (s *DNSServer) SetNegativeTTL(ttl uint32) {
	s.mu.Lock()
	s.negTTL = ttl
	s.mu.Unlock()
}

// SetMode sets how the server answers from now on.
func (s *DNSServer) SetMode(m DNSMode) {
	s.mu.Lock()
	s.mode = m
	s.mu.Unlock()
}

// Hold makes every answer from now on wait until release is called (or
// the server closes): a query in flight, for lookups to pile up on.
func (s *DNSServer) Hold() (release func()) {
	ch := make(chan struct{})
	s.mu.Lock()
	s.hold = ch
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			if s.hold == ch {
				s.hold = nil
			}
			s.mu.Unlock()
			close(ch)
		})
	}
}

// Asked returns how many questions (of any type, on any transport) name
// was asked.
func (s *DNSServer) Asked(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.asked[fqdn(name)]
}

func fqdn(name string) string {
	return strings.ToLower(strings.TrimSuffix(name, ".")) + "."
}

func (s *DNSServer) serveUDP(pc net.PacketConn) {
	buf := make([]byte, 65535)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		if resp := s.answer(buf[:n], true); resp != nil {
			pc.WriteTo(resp, from)
		}
	}
}

func (s *DNSServer) serveStream(ln net.Listener) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			continue
		}
		s.closers = append(s.closers, c)
		s.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			for {
				var n [2]byte
				if _, err := io.ReadFull(c, n[:]); err != nil {
					return
				}
				msg := make([]byte, binary.BigEndian.Uint16(n[:]))
				if _, err := io.ReadFull(c, msg); err != nil {
					return
				}
				resp := s.answer(msg, false)
				if resp == nil {
					continue // dropped: the client times out
				}
				out := binary.BigEndian.AppendUint16(nil, uint16(len(resp)))
				if _, err := c.Write(append(out, resp...)); err != nil {
					return
				}
			}
		}()
	}
}

func (s *DNSServer) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/dns-message" {
		http.Error(w, "want a POST of application/dns-message", http.StatusBadRequest)
		return
	}
	msg, err := io.ReadAll(io.LimitReader(r.Body, 65535))
	if err != nil {
		return
	}
	resp := s.answer(msg, false)
	if resp == nil {
		<-r.Context().Done() // dropped: the client times out
		return
	}
	w.Header().Set("Content-Type", "application/dns-message")
	w.Write(resp)
}

// answer builds the response to the query msg; nil = none.
func (s *DNSServer) answer(msg []byte, udp bool) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(msg)
	if err != nil {
		return nil
	}
	q, err := p.Question()
	if err != nil {
		return nil
	}
	name := strings.ToLower(q.Name.String())
	s.mu.Lock()
	s.asked[name]++
	hold := s.hold
	s.mu.Unlock()
	if hold != nil {
		<-hold
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired, RecursionAvailable: true}
	switch s.mode {
	case DNSDrop:
		return nil
	case DNSServFail:
		rh.RCode = dnsmessage.RCodeServerFailure
		return s.build(rh, q, nil)
	case DNSTruncate:
		if udp {
			rh.Truncated = true
			return s.build(rh, q, nil)
		}
	}
	var answers []func(*dnsmessage.Builder) error
	cur := name
	known := false
	for range 8 {
		if c, ok := s.records[dnsKey{cur, dnsmessage.TypeCNAME}]; ok {
			known = true
			from, rec := cur, c[0]
			answers = append(answers, func(b *dnsmessage.Builder) error {
				return b.CNAMEResource(dnsmessage.ResourceHeader{Name: dnsmessage.MustNewName(from), Class: dnsmessage.ClassINET, TTL: rec.ttl},
					dnsmessage.CNAMEResource{CNAME: dnsmessage.MustNewName(rec.cname)})
			})
			cur = rec.cname
			continue
		}
		break
	}
	for _, t := range []dnsmessage.Type{dnsmessage.TypeA, dnsmessage.TypeAAAA} {
		if _, ok := s.records[dnsKey{cur, t}]; ok {
			known = true
		}
	}
	recs := s.records[dnsKey{cur, q.Type}]
	if !known && s.anyA != nil && q.Type == dnsmessage.TypeA {
		known, recs = true, s.anyA
	}
	for _, rec := range recs {
		owner, rec := cur, rec
		answers = append(answers, func(b *dnsmessage.Builder) error {
			hdr := dnsmessage.ResourceHeader{Name: dnsmessage.MustNewName(owner), Class: dnsmessage.ClassINET, TTL: rec.ttl}
			if rec.addr.Is4() {
				return b.AResource(hdr, dnsmessage.AResource{A: rec.addr.As4()})
			}
			return b.AAAAResource(hdr, dnsmessage.AAAAResource{AAAA: rec.addr.As16()})
		})
	}
	if !known {
		rh.RCode = dnsmessage.RCodeNameError
	}
	return s.build(rh, q, answers)
}

func (s *DNSServer) build(h dnsmessage.Header, q dnsmessage.Question, answers []func(*dnsmessage.Builder) error) []byte {
	b := dnsmessage.NewBuilder(nil, h)
	err := errors.Join(b.StartQuestions(), b.Question(q), b.StartAnswers())
	for _, a := range answers {
		err = errors.Join(err, a(&b))
	}
	if h.RCode == dnsmessage.RCodeNameError || len(answers) == 0 && h.RCode == dnsmessage.RCodeSuccess && !h.Truncated {
		err = errors.Join(err, b.StartAuthorities(), b.SOAResource(
			dnsmessage.ResourceHeader{Name: dnsmessage.MustNewName("test."), Class: dnsmessage.ClassINET, TTL: s.negTTL},
			dnsmessage.SOAResource{NS: dnsmessage.MustNewName("ns.test."), MBox: dnsmessage.MustNewName("hostmaster.test."),
				Serial: 1, Refresh: 3600, Retry: 600, Expire: 86400, MinTTL: s.negTTL}))
	}
	out, ferr := b.Finish()
	if err != nil || ferr != nil {
		return nil
	}
	return out
}
