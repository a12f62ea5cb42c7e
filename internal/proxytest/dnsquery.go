package proxytest

import (
	"net/netip"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// DNSFixedA is the address a DNS server of StartDNS gives every A query.
var DNSFixedA = [4]byte{192, 0, 2, 53}

// StartDNS runs a DNSServer (see NewDNSServer) that answers the A query
// of every name with DNSFixedA, until the test ends: the DNS destination
// of UDP flow tests (its UDP field).
func StartDNS(t testing.TB) *DNSServer {
	t.Helper()
	s := NewDNSServer(t)
	s.SetAny(60, netip.AddrFrom4(DNSFixedA))
	return s
}

// DNSQuery returns a query with id for name's A record.
func DNSQuery(t testing.TB, id uint16, name string) []byte {
	t.Helper()
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: id, RecursionDesired: true})
	b.StartQuestions()
	b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET})
	q, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// CheckDNSAnswer fails the test unless b is the answer to query id with
// DNSFixedA.
func CheckDNSAnswer(t testing.TB, b []byte, id uint16) {
	t.Helper()
	var p dnsmessage.Parser
	h, err := p.Start(b)
	if err != nil || h.ID != id || !h.Response {
		t.Fatalf("DNS answer header %+v, %v: want the answer to query %d", h, err, id)
	}
	p.SkipAllQuestions()
	a, err := p.Answer()
	if err != nil {
		t.Fatalf("DNS answer: %v", err)
	}
	if r, ok := a.Body.(*dnsmessage.AResource); !ok || r.A != DNSFixedA {
		t.Fatalf("DNS answer %v, want A %v", a.Body, DNSFixedA)
	}
}
