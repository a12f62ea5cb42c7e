package resolve

import (
	"net/url"
	"strings"
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

// FuzzParseServer: any string parses or is refused without a panic, and
// the label of an accepted URL never holds its password.
func FuzzParseServer(f *testing.F) {
	for _, s := range []string{"udp://192.0.2.1", "tcp://[2001:db8::1]:53", "tls://dns.example:853",
		"https://u:secret@dns.example/dns-query", "https://dns.example", "udp://:53", "https://[::1", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		srv, err := ParseServer(s)
		if err != nil {
			return
		}
		// The label holds no userinfo. (Its path may hold the password's
		// text when the URL's does: "https://:secret@0/:secret@".)
		if u, perr := url.Parse(s); perr == nil && u.User != nil {
			if p, ok := u.User.Password(); ok && p != "" && strings.Contains(srv.Label, ":"+p+"@") &&
				!strings.Contains(u.Path, ":"+p+"@") && !strings.Contains(u.EscapedPath(), ":"+p+"@") {
				t.Fatalf("label %q shows the password", srv.Label)
			}
		}
		if lu, perr := url.Parse(srv.Label); perr != nil || lu.User != nil {
			t.Fatalf("label %q: userinfo %v, parse error %v", srv.Label, lu.User, perr)
		}
		if srv.Transport != HTTPS && srv.Addr == "" {
			t.Fatalf("%q: no address", s)
		}
	})
}
