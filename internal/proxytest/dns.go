package proxytest

import (
	"net"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// DNSAnswer is the address a DNS server of StartDNS gives every A query.
var DNSAnswer = [4]byte{192, 0, 2, 53}

// StartDNS runs a tiny DNS server on a loopback UDP port until the test
// ends: it answers every query with one A record, DNSAnswer, and ignores
// what it cannot parse.
func StartDNS(t testing.TB) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { c.Close(); <-done })
	go func() {
		defer close(done)
		buf := make([]byte, 1500)
		for {
			n, from, err := c.ReadFromUDP(buf)
			if err != nil {
				return
			}
			var p dnsmessage.Parser
			h, err := p.Start(buf[:n])
			if err != nil {
				continue
			}
			q, err := p.Question()
			if err != nil {
				continue
			}
			b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true})
			b.StartQuestions()
			b.Question(q)
			b.StartAnswers()
			b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 60},
				dnsmessage.AResource{A: DNSAnswer})
			out, err := b.Finish()
			if err != nil {
				continue
			}
			c.WriteToUDP(out, from)
		}
	}()
	return c
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
// DNSAnswer.
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
	if r, ok := a.Body.(*dnsmessage.AResource); !ok || r.A != DNSAnswer {
		t.Fatalf("DNS answer %v, want A %v", a.Body, DNSAnswer)
	}
}
