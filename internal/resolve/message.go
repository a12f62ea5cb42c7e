package resolve

import (
	"errors"
	"fmt"
	"net/netip"

	"golang.org/x/net/dns/dnsmessage"
)

// maxCNAMEs bounds the CNAME chain an answer is followed through.
const maxCNAMEs = 8

// ednsSize is the UDP payload size rustle advertises (EDNS(0)): the
// DNS flag day 2020 value, which avoids IP fragmentation.
const ednsSize = 1232

// errTruncated is an answer over UDP with the TC bit: asked again over
// TCP.
var errTruncated = errors.New("resolve: answer truncated")

// buildQuery appends to buf a recursive query with id for name and type t,
// with an EDNS(0) record.
func buildQuery(buf []byte, id uint16, name dnsmessage.Name, t dnsmessage.Type) ([]byte, error) {
	b := dnsmessage.NewBuilder(buf, dnsmessage.Header{ID: id, RecursionDesired: true})
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(dnsmessage.Question{Name: name, Type: t, Class: dnsmessage.ClassINET}); err != nil {
		return nil, err
	}
	if err := b.StartAdditionals(); err != nil {
		return nil, err
	}
	var rh dnsmessage.ResourceHeader
	if err := rh.SetEDNS0(ednsSize, dnsmessage.RCodeSuccess, false); err != nil {
		return nil, err
	}
	if err := b.OPTResource(rh, dnsmessage.OPTResource{}); err != nil {
		return nil, err
	}
	return b.Finish()
}

// answer is what a server answered to one question.
type answer struct {
	// addrs are the addresses of the question's type, at the end of the
	// CNAME chain from the question's name; empty for a negative answer.
	addrs []netip.Addr
	// ttl is the least TTL of the records that led to addrs, or for a
	// negative answer the SOA's negative TTL (min of its TTL and
	// MINIMUM, RFC 2308 §5).
	ttl uint32
	// soa says a negative answer carried an SOA, so ttl is meaningful.
	soa bool
	// nxdomain says the name does not exist (rather than having no
	// record of the type).
	nxdomain bool
}

// errRCode is a response code that is no answer (SERVFAIL, REFUSED,
// ...): the next server is asked.
type errRCode dnsmessage.RCode

func (e errRCode) Error() string {
	return "resolve: server answered " + dnsmessage.RCode(e).String()
}

// parseAnswer parses msg, the response to the query with id for q (id is
// not checked when checkID is false: DNS over HTTPS sends 0). It returns
// errTruncated for a truncated response to q, an errRCode for a response
// code other than NOERROR and NXDOMAIN, and another error for anything
// that is not a response to q (see [isAnswer]).
func parseAnswer(msg []byte, id uint16, checkID bool, q dnsmessage.Question) (answer, error) {
	var p dnsmessage.Parser
	h, err := p.Start(msg)
	if err != nil {
		return answer{}, fmt.Errorf("resolve: malformed response: %w", err)
	}
	if !h.Response {
		return answer{}, errors.New("resolve: not a response")
	}
	if checkID && h.ID != id {
		return answer{}, errors.New("resolve: response ID does not match the query")
	}
	qs, err := p.AllQuestions()
	if err != nil {
		return answer{}, fmt.Errorf("resolve: malformed question: %w", err)
	}
	if h.Truncated && len(qs) == 0 {
		// A truncated response may lack its question; it is asked again
		// over TCP, which a spoofer off the path cannot answer.
		return answer{}, errTruncated
	}
	if len(qs) != 1 || qs[0].Type != q.Type || qs[0].Class != q.Class || !equalName(qs[0].Name, q.Name) {
		return answer{}, errors.New("resolve: response is for another question")
	}
	if h.Truncated {
		return answer{}, errTruncated
	}
	switch h.RCode {
	case dnsmessage.RCodeSuccess, dnsmessage.RCodeNameError:
	default:
		return answer{}, errRCode(h.RCode)
	}
	var a answer
	a.nxdomain = h.RCode == dnsmessage.RCodeNameError
	name := q.Name
	ttl := uint32(1<<32 - 1)
	// The chain's CNAMEs may come in any order: collect, then follow.
	type cname struct {
		from, to dnsmessage.Name
		ttl      uint32
	}
	var cnames []cname
	type rec struct {
		name dnsmessage.Name
		ip   netip.Addr
		ttl  uint32
	}
	var recs []rec
	for {
		rh, err := p.AnswerHeader()
		if errors.Is(err, dnsmessage.ErrSectionDone) {
			break
		}
		if err != nil {
			return answer{}, fmt.Errorf("resolve: malformed answer: %w", err)
		}
		if rh.Class != dnsmessage.ClassINET {
			if err := p.SkipAnswer(); err != nil {
				return answer{}, fmt.Errorf("resolve: malformed answer: %w", err)
			}
			continue
		}
		switch {
		case rh.Type == dnsmessage.TypeCNAME:
			r, err := p.CNAMEResource()
			if err != nil {
				return answer{}, fmt.Errorf("resolve: malformed CNAME: %w", err)
			}
			if len(cnames) < 4*maxCNAMEs {
				cnames = append(cnames, cname{rh.Name, r.CNAME, rh.TTL})
			}
		case rh.Type == dnsmessage.TypeA && q.Type == dnsmessage.TypeA:
			r, err := p.AResource()
			if err != nil {
				return answer{}, fmt.Errorf("resolve: malformed A record: %w", err)
			}
			recs = append(recs, rec{rh.Name, netip.AddrFrom4(r.A), rh.TTL})
		case rh.Type == dnsmessage.TypeAAAA && q.Type == dnsmessage.TypeAAAA:
			r, err := p.AAAAResource()
			if err != nil {
				return answer{}, fmt.Errorf("resolve: malformed AAAA record: %w", err)
			}
			recs = append(recs, rec{rh.Name, netip.AddrFrom16(r.AAAA), rh.TTL})
		default:
			if err := p.SkipAnswer(); err != nil {
				return answer{}, fmt.Errorf("resolve: malformed answer: %w", err)
			}
		}
	}
	for range maxCNAMEs {
		next := -1
		for i, c := range cnames {
			if equalName(c.from, name) {
				next = i
				break
			}
		}
		if next < 0 {
			break
		}
		name = cnames[next].to
		ttl = min(ttl, cnames[next].ttl)
	}
	minRec := uint32(1<<32 - 1)
	for _, r := range recs {
		if equalName(r.name, name) {
			a.addrs = append(a.addrs, r.ip)
			minRec = min(minRec, r.ttl)
		}
	}
	if len(a.addrs) > 0 {
		a.nxdomain = false
		a.ttl = min(ttl, minRec)
		return a, nil
	}
	// Negative: the SOA in the authority section gives its TTL.
	for {
		rh, err := p.AuthorityHeader()
		if err != nil {
			break // ErrSectionDone, or a malformed authority: no SOA then
		}
		if rh.Type != dnsmessage.TypeSOA {
			if p.SkipAuthority() != nil {
				break
			}
			continue
		}
		r, err := p.SOAResource()
		if err != nil {
			break
		}
		a.soa, a.ttl = true, min(rh.TTL, r.MinTTL)
		break
	}
	return a, nil
}

// isAnswer reports whether err, parseAnswer's, still makes the message
// an answer to the question: nil, errTruncated or an errRCode. Any other
// error is a message that is no answer to it (not a response, another ID
// or question, malformed), which a UDP query ignores.
func isAnswer(err error) bool {
	var rc errRCode
	return err == nil || errors.Is(err, errTruncated) || errors.As(err, &rc)
}

// equalName compares DNS names case-insensitively (ASCII, RFC 4343).
func equalName(a, b dnsmessage.Name) bool {
	if a.Length != b.Length {
		return false
	}
	for i := range int(a.Length) {
		x, y := a.Data[i], b.Data[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}
