package resolve

import (
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// FuzzParseAnswer feeds arbitrary responses to the parser: it must not
// panic, and an answer it accepts has only addresses of the type asked.
func FuzzParseAnswer(f *testing.F) {
	q := dnsmessage.Question{Name: dnsmessage.MustNewName("www.example.com."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}
	query, err := buildQuery(nil, 7, q.Name, q.Type)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(query)
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 7, Response: true})
	b.StartQuestions()
	b.Question(q)
	b.StartAnswers()
	b.CNAMEResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 5}, dnsmessage.CNAMEResource{CNAME: dnsmessage.MustNewName("b.example.")})
	b.AResource(dnsmessage.ResourceHeader{Name: dnsmessage.MustNewName("b.example."), Class: dnsmessage.ClassINET, TTL: 9}, dnsmessage.AResource{A: [4]byte{192, 0, 2, 1}})
	msg, err := b.Finish()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(msg)
	f.Fuzz(func(t *testing.T, msg []byte) {
		a, err := parseAnswer(msg, 7, true, q)
		if err != nil {
			return
		}
		for _, ip := range a.addrs {
			if !ip.Is4() {
				t.Fatalf("A answer holds %v", ip)
			}
		}
	})
}
