package main

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// serveDNS runs a DNS responder on a port-0 loopback UDP socket for the
// test's lifetime and returns it and its address.
func serveDNS(t *testing.T) (*dnsResponder, string) {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &dnsResponder{}
	var wg sync.WaitGroup
	wg.Go(func() { d.serve(pc) })
	t.Cleanup(func() {
		pc.Close()
		wg.Wait()
	})
	return d, pc.LocalAddr().String()
}

// TestDNSResolver asks the responder with Go's own stub resolver, as a
// proxy would: origin.bench.test is 127.0.0.1 and nothing else, another
// name of the zone does not exist, and a name outside it is refused.
func TestDNSResolver(t *testing.T) {
	d, addr := serveDNS(t)
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "udp", addr)
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	got, err := r.LookupNetIP(ctx, "ip", "origin.bench.test")
	if err != nil {
		t.Fatalf("LookupNetIP(origin.bench.test): %v", err)
	}
	if want := []netip.Addr{netip.MustParseAddr("127.0.0.1")}; !slices.Equal(got, want) {
		t.Errorf("origin.bench.test = %v, want %v", got, want)
	}
	if _, err := r.LookupNetIP(ctx, "ip6", "origin.bench.test"); !isNotFound(err) {
		t.Errorf("AAAA of origin.bench.test: err %v, want not found", err)
	}
	if _, err := r.LookupNetIP(ctx, "ip", "other.bench.test"); !isNotFound(err) {
		t.Errorf("other.bench.test: err %v, want not found", err)
	}
	if _, err := r.LookupNetIP(ctx, "ip4", "example.com"); err == nil || isNotFound(err) {
		t.Errorf("example.com: err %v, want a refusal (no recursion)", err)
	}
	if n := d.queries.Load(); n < 5 {
		t.Errorf("queries counted = %d, want at least 5", n)
	}
}

func isNotFound(err error) bool {
	var de *net.DNSError
	return errors.As(err, &de) && de.IsNotFound
}

// TestDNSAnswers checks the responder's messages themselves: the ID and
// question echoed, the TTL of the answer (what lets a cache answer
// afterwards), the SOA of a negative answer, and the rcodes.
func TestDNSAnswers(t *testing.T) {
	tests := []struct {
		name     string
		qname    string
		qtype    dnsmessage.Type
		opcode   dnsmessage.OpCode
		rcode    dnsmessage.RCode
		auth     bool
		answerA  []byte // the A record expected, nil for none
		soaTTL   uint32 // the SOA expected in the authority section, 0 for none
		response bool   // the message is a response: no answer at all
	}{
		{name: "A", qname: "origin.bench.test.", qtype: dnsmessage.TypeA, auth: true, answerA: []byte{127, 0, 0, 1}},
		{name: "A mixed case", qname: "Origin.Bench.TEST.", qtype: dnsmessage.TypeA, auth: true, answerA: []byte{127, 0, 0, 1}},
		{name: "AAAA is NODATA", qname: "origin.bench.test.", qtype: dnsmessage.TypeAAAA, auth: true, soaTTL: dnsTTL},
		{name: "unknown name", qname: "nope.bench.test.", qtype: dnsmessage.TypeA, auth: true, rcode: dnsmessage.RCodeNameError, soaTTL: dnsTTL},
		{name: "outside the zone", qname: "example.com.", qtype: dnsmessage.TypeA, rcode: dnsmessage.RCodeRefused},
		{name: "not a query", qname: "origin.bench.test.", qtype: dnsmessage.TypeA, opcode: 2, rcode: dnsmessage.RCodeNotImplemented},
		{name: "a response is dropped", qname: "origin.bench.test.", qtype: dnsmessage.TypeA, response: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := dnsmessage.Question{Name: dnsmessage.MustNewName(tt.qname), Type: tt.qtype, Class: dnsmessage.ClassINET}
			b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 0x4242, RecursionDesired: true, OpCode: tt.opcode, Response: tt.response})
			if err := b.StartQuestions(); err != nil {
				t.Fatal(err)
			}
			if err := b.Question(q); err != nil {
				t.Fatal(err)
			}
			msg, err := b.Finish()
			if err != nil {
				t.Fatal(err)
			}
			var d dnsResponder
			resp, ok := d.answer(msg, nil)
			if tt.response {
				if ok || d.queries.Load() != 0 {
					t.Fatalf("a response was answered (%v) or counted (%d)", ok, d.queries.Load())
				}
				return
			}
			if !ok {
				t.Fatal("no answer")
			}
			var m dnsmessage.Message
			if err := m.Unpack(resp); err != nil {
				t.Fatal(err)
			}
			if m.ID != 0x4242 || !m.Response || !m.RecursionDesired || m.RCode != tt.rcode || m.Authoritative != tt.auth {
				t.Errorf("header = %+v, want ID 0x4242, response, RD, rcode %v, authoritative %v", m.Header, tt.rcode, tt.auth)
			}
			if len(m.Questions) != 1 || m.Questions[0] != q {
				t.Errorf("questions = %v, want [%v]", m.Questions, q)
			}
			var gotA []byte
			for _, a := range m.Answers {
				if r, ok := a.Body.(*dnsmessage.AResource); ok && a.Header.TTL == dnsTTL && a.Header.Name == q.Name {
					gotA = r.A[:]
				} else {
					t.Errorf("unexpected answer %v", a)
				}
			}
			if !slices.Equal(gotA, tt.answerA) {
				t.Errorf("A = %v, want %v", gotA, tt.answerA)
			}
			var soaTTL uint32
			for _, a := range m.Authorities {
				if r, ok := a.Body.(*dnsmessage.SOAResource); ok && a.Header.Name.String() == dnsZone {
					soaTTL = min(a.Header.TTL, r.MinTTL)
				}
			}
			if soaTTL != tt.soaTTL {
				t.Errorf("SOA negative TTL = %d, want %d", soaTTL, tt.soaTTL)
			}
			if d.queries.Load() != 1 {
				t.Errorf("queries counted = %d, want 1", d.queries.Load())
			}
		})
	}
}

// TestDNSStats: /_stats reports the responder's queries.
func TestDNSStats(t *testing.T) {
	o := newOrigin()
	o.dns.queries.Add(3)
	if got := o.stats().DNSQueries; got != 3 {
		t.Errorf("stats().DNSQueries = %d, want 3", got)
	}
}
