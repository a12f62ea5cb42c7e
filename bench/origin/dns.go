package main

import (
	"errors"
	"net"
	"strings"
	"sync/atomic"

	"golang.org/x/net/dns/dnsmessage"
)

// The zone of the origin's DNS responder: the names the campaign's DNS
// rows ask a proxy to resolve with resolvers it is told about ([dns] in
// rustle), which no other resolver knows. Names under dnsZone that are
// not in dnsNames do not exist (NXDOMAIN); names outside it are refused:
// the responder is no recursive resolver.
const (
	dnsZone = "bench.test."
	// dnsTTL is the TTL of every answer, positive or negative (the SOA's
	// minimum): long enough that a caching resolver asks once per test.
	dnsTTL = 300
)

// dnsNames maps the responder's names (lower case, fully qualified) to
// their one IPv4 address. They have no IPv6 address: an AAAA question
// gets an empty answer (NODATA) with the zone's SOA.
var dnsNames = map[string][4]byte{
	"origin." + dnsZone: {127, 0, 0, 1},
}

// dnsResponder answers DNS questions over UDP for the names of dnsNames,
// counting the queries it answers.
type dnsResponder struct {
	queries atomic.Int64
}

// serve answers every datagram on pc until pc is closed.
func (d *dnsResponder) serve(pc net.PacketConn) {
	req := make([]byte, 1500)
	out := make([]byte, 0, 512)
	for {
		n, addr, err := pc.ReadFrom(req)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		resp, ok := d.answer(req[:n], out[:0])
		if !ok {
			continue
		}
		pc.WriteTo(resp, addr)
	}
}

// answer builds into buf the response to the query msg and reports
// whether there is one: a message that is no query (a response, or too
// short for a header) is dropped.
func (d *dnsResponder) answer(msg, buf []byte) ([]byte, bool) {
	var p dnsmessage.Parser
	h, err := p.Start(msg)
	if err != nil || h.Response {
		return nil, false
	}
	d.queries.Add(1)
	rh := dnsmessage.Header{ID: h.ID, Response: true, OpCode: h.OpCode, RecursionDesired: h.RecursionDesired}
	q, err := p.Question()
	switch {
	case err != nil:
		rh.RCode = dnsmessage.RCodeFormatError
		return finish(dnsmessage.NewBuilder(buf, rh))
	case h.OpCode != 0:
		rh.RCode = dnsmessage.RCodeNotImplemented
	case q.Class != dnsmessage.ClassINET || !inZone(q.Name.String()):
		rh.RCode = dnsmessage.RCodeRefused
	default:
		rh.Authoritative = true
	}
	name := strings.ToLower(q.Name.String())
	ip, known := dnsNames[name]
	if rh.Authoritative && !known {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(buf, rh)
	b.EnableCompression()
	if b.StartQuestions() != nil || b.Question(q) != nil {
		return nil, false
	}
	if !rh.Authoritative {
		return finish(b)
	}
	if known && q.Type == dnsmessage.TypeA {
		if b.StartAnswers() != nil ||
			b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: dnsTTL}, dnsmessage.AResource{A: ip}) != nil {
			return nil, false
		}
		return finish(b)
	}
	// NXDOMAIN, or NODATA for another type: the SOA says how long the
	// negative answer may be cached (RFC 2308).
	zone := dnsmessage.MustNewName(dnsZone)
	soa := dnsmessage.SOAResource{
		NS: dnsmessage.MustNewName("ns." + dnsZone), MBox: dnsmessage.MustNewName("bench." + dnsZone),
		Serial: 1, Refresh: dnsTTL, Retry: dnsTTL, Expire: dnsTTL, MinTTL: dnsTTL,
	}
	if b.StartAuthorities() != nil || b.SOAResource(dnsmessage.ResourceHeader{Name: zone, Class: dnsmessage.ClassINET, TTL: dnsTTL}, soa) != nil {
		return nil, false
	}
	return finish(b)
}

// finish returns the message b built.
func finish(b dnsmessage.Builder) ([]byte, bool) {
	out, err := b.Finish()
	return out, err == nil
}

// inZone reports whether the fully qualified name is dnsZone or under it.
func inZone(name string) bool {
	name = strings.ToLower(name)
	return name == dnsZone || strings.HasSuffix(name, "."+dnsZone)
}
