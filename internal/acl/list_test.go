package acl_test

import (
	"bytes"
	"fmt"
	"io"
	"net/netip"
	"runtime"
	"strings"
	"testing"

	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// loadList parses src as a list of kind into a new List.
func loadList(t testing.TB, kind acl.ListKind, src string) (*acl.List, acl.ListStats) {
	t.Helper()
	s, st, err := acl.ParseList(strings.NewReader(src), kind)
	if err != nil {
		t.Fatalf("ParseList: %v", err)
	}
	l := acl.NewList("test", kind)
	l.Store(s)
	return l, st
}

// TestParseList checks the line formats a list takes: entries as a
// rule's hosts takes them, comments, blank lines and CRLF, hosts-file
// lines, Adblock domain rules and headers, and the lines it skips.
func TestParseList(t *testing.T) {
	const src = "# a comment\r\n" +
		"\n" +
		"exact.example\r\n" +
		"  *.under.example   # trailing comment\n" +
		".apex.example\n" +
		"Upper.Case.Example.\n" +
		"0.0.0.0 ads.example tracker.example\n" +
		"127.0.0.1 localhost\n" +
		"0.0.0.0 0.0.0.0\n" +
		"::1 ip6-localhost ip6-loopback\n" +
		"[Adblock Plus 2.0]\n" +
		"! adblock comment\n" +
		"||block.example^\n" +
		"192.0.2.0/24\n" +
		"2001:db8::/32\n" +
		"198.51.100.7\n" +
		"not a line\n" +
		"bad_host!.example\n" +
		"0.0.0.0 good.example bad!name\n" +
		"no-newline.example"
	l, st := loadList(t, acl.HostList, src)
	if st.Lines != 20 || st.Bad != 3 || st.Entries != 14 {
		t.Errorf("stats = %+v, want 20 lines, 3 bad, 14 entries", st)
	}
	if len(st.FirstBad) != 3 || !strings.HasPrefix(st.FirstBad[0], "line 17: ") {
		t.Errorf("FirstBad = %q, want three, the first line 17's", st.FirstBad)
	}
	p := mustPolicy(t, acl.Config{Default: acl.Allow, Rules: []acl.Rule{{Name: "list", Action: acl.Deny, HostLists: []*acl.List{l}}}})
	for host, listed := range map[string]bool{
		"exact.example": true, "www.exact.example": false,
		"under.example": false, "a.b.under.example": true,
		"apex.example": true, "www.apex.example": true,
		"upper.case.example": true, "ADS.example": true, "tracker.example.": true, "localhost": true,
		"ip6-loopback": true, "block.example": true, "cdn.block.example": true,
		"192.0.2.77": true, "192.0.3.1": false, "2001:db8:1::1": true, "198.51.100.7": true, "198.51.100.8": false,
		"0.0.0.0": false, "good.example": false, "no-newline.example": true, "other.example": false,
	} {
		if allow, _ := p.Check(acl.Request{Host: host, Port: 443}); allow == listed {
			t.Errorf("%s: listed = %v, want %v", host, !allow, listed)
		}
	}
	if err := st.Err(); err == nil || !strings.Contains(err.Error(), "3 of 17 lines") {
		t.Errorf("Err = %v, want 3 of 17 lines refused (more than 1%% bad)", err)
	}

	cl, cst := loadList(t, acl.ClientList, "10.0.0.0/8 # office\n192.0.2.9\n::1\nexample.com\n")
	if cst.Entries != 3 || cst.Bad != 1 {
		t.Errorf("client list stats = %+v, want 3 entries and 1 bad", cst)
	}
	p = mustPolicy(t, acl.Config{Rules: []acl.Rule{{Name: "office", Action: acl.Allow, ClientLists: []*acl.List{cl}}}})
	for client, want := range map[string]bool{"10.1.2.3": true, "::ffff:10.1.2.3": true, "192.0.2.9": true, "192.0.2.10": false, "::1": true, "::2": false} {
		if allow, _ := p.Check(acl.Request{Client: netip.MustParseAddr(client), Host: "example.com", Port: 443}); allow != want {
			t.Errorf("client %s: allow = %v, want %v", client, allow, want)
		}
	}
}

// TestListErr checks when a list is refused as malformed: more than 1%
// of its lines with content bad, or bad lines and no entry; a list of
// comments only, or with one bad line in a hundred, is taken.
func TestListErr(t *testing.T) {
	good := strings.Repeat("a.example\n", 98)
	for _, tt := range []struct {
		name, src string
		refused   bool
	}{
		{"empty", "", false},
		{"comments only", "# nothing yet\n", false},
		{"one bad in a hundred", good + "a.example\n# comment\nbad line here\n", false},
		{"two bad in a hundred", good + "bad line\nbad line\n", true},
		{"only garbage", "<html><body>Not found</body></html>\n", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, st, err := acl.ParseList(strings.NewReader(tt.src), acl.HostList)
			if err != nil {
				t.Fatal(err)
			}
			if got := st.Err() != nil; got != tt.refused {
				t.Errorf("Err = %v, want refused %v (stats %+v)", st.Err(), tt.refused, st)
			}
		})
	}
}

// TestListGarbage feeds ParseList a million lines of garbage and lines
// far longer than a list's: it reads them to the end without keeping
// them, counts them bad, and the list is refused.
func TestListGarbage(t *testing.T) {
	garbage := bytes.Repeat([]byte("\x00\xff<junk> !!\"'{}\n"), 1_000_000)
	long := bytes.Repeat([]byte("x"), 200_000) // over the reader's buffer: one bad line
	src := io.MultiReader(bytes.NewReader(garbage), bytes.NewReader(long), strings.NewReader("\nok.example\n"))
	s, st, err := acl.ParseList(src, acl.HostList)
	if err != nil {
		t.Fatal(err)
	}
	if st.Lines != 1_000_002 || st.Bad != 1_000_001 || st.Entries != 1 || s.Len() != 1 {
		t.Errorf("stats = %d lines, %d bad, %d entries; want 1000002, 1000001, 1", st.Lines, st.Bad, st.Entries)
	}
	if st.Err() == nil {
		t.Error("a list of garbage is not refused")
	}
	if s.Bytes() > 1<<20 {
		t.Errorf("the set of one entry holds %d bytes", s.Bytes())
	}
}

// TestListMatchesAsHosts checks that an entry matches the same requests
// whether it is a rule's hosts entry or a line of a list the rule names,
// for names, addresses and pending decisions.
func TestListMatchesAsHosts(t *testing.T) {
	entries := []string{"exact.example", "*.under.example", ".apex.example", "10.1.0.0/16", "192.0.2.7", "2001:db8::/48", "::ffff:198.51.100.0/120", "0.0.0.0/0"}
	hosts := []string{"exact.example", "x.exact.example", "under.example", "a.under.example", "apex.example", "b.apex.example",
		"10.1.2.3", "10.2.0.1", "192.0.2.7", "2001:db8::5", "2001:db9::5", "198.51.100.9", "name.example", "EXACT.EXAMPLE.", "127.1"}
	addrs := []string{"10.1.9.9", "203.0.113.1", "2001:db8::9"}
	for _, e := range entries {
		inline := mustPolicy(t, acl.Config{Rules: []acl.Rule{{Name: "r", Action: acl.Allow, Hosts: []string{e}}}})
		l, st := loadList(t, acl.HostList, e+"\n")
		if st.Entries != 1 {
			t.Fatalf("entry %q: stats %+v", e, st)
		}
		listed := mustPolicy(t, acl.Config{Rules: []acl.Rule{{Name: "r", Action: acl.Allow, HostLists: []*acl.List{l}}}})
		for _, h := range hosts {
			r := acl.Request{Host: h, Port: 1}
			a, b := inline.Decide(r), listed.Decide(r)
			if a.Allow != b.Allow || a.Rule != b.Rule || a.Pending() != b.Pending() {
				t.Errorf("entry %q host %q: inline %v %q pending %v, list %v %q pending %v",
					e, h, a.Allow, a.Rule, a.Pending(), b.Allow, b.Rule, b.Pending())
			}
			for _, ip := range addrs {
				okA, _ := a.Permit(netip.MustParseAddr(ip))
				okB, _ := b.Permit(netip.MustParseAddr(ip))
				if okA != okB {
					t.Errorf("entry %q host %q addr %s: inline permits %v, list %v", e, h, ip, okA, okB)
				}
			}
		}
	}
}

// TestListNeverLoaded checks that a list that never loaded never opens
// the policy: an allow rule matches nothing by it, a deny rule every
// request its other criteria match, a report rule reports them, and a
// route (a Matcher) is not taken; storing a set swaps it in for every
// rule at once.
func TestListNeverLoaded(t *testing.T) {
	hostsL := acl.NewList("https://lists.example/block.txt", acl.HostList)
	clientsL := acl.NewList("clients.txt", acl.ClientList)
	r := acl.Request{Client: outside, Host: "www.example.com", Port: 443, Protocol: acl.Connect}
	for _, tt := range []struct {
		name      string
		rule      acl.Rule
		allow     bool
		rule2     string
		wouldDeny string
	}{
		{"allow by hosts", acl.Rule{Name: "r", Action: acl.Allow, HostLists: []*acl.List{hostsL}}, false, acl.DefaultRule, ""},
		{"allow by clients", acl.Rule{Name: "r", Action: acl.Allow, ClientLists: []*acl.List{clientsL}}, false, acl.DefaultRule, ""},
		{"allow by hosts or an inline entry", acl.Rule{Name: "r", Action: acl.Allow, Hosts: []string{".example.com"}, HostLists: []*acl.List{hostsL}}, true, "r", ""},
		{"deny by hosts", acl.Rule{Name: "r", Action: acl.Deny, HostLists: []*acl.List{hostsL}}, false, "r", ""},
		{"deny by clients", acl.Rule{Name: "r", Action: acl.Deny, ClientLists: []*acl.List{clientsL}}, false, "r", ""},
		{"deny other ports", acl.Rule{Name: "r", Action: acl.Deny, Ports: []string{"80"}, HostLists: []*acl.List{hostsL}}, true, acl.DefaultRule, ""},
		{"report", acl.Rule{Name: "r", Action: acl.Report, HostLists: []*acl.List{hostsL}}, true, "r", "r"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := mustPolicy(t, acl.Config{Default: acl.Allow, Rules: []acl.Rule{tt.rule}})
			if tt.rule.Action == acl.Allow {
				p = mustPolicy(t, acl.Config{Default: acl.Deny, Rules: []acl.Rule{tt.rule}})
			}
			d := p.Decide(r)
			if d.Allow != tt.allow || d.Rule != tt.rule2 || d.WouldDeny != tt.wouldDeny {
				t.Errorf("Decide = allow %v rule %q would deny %q, want %v %q %q", d.Allow, d.Rule, d.WouldDeny, tt.allow, tt.rule2, tt.wouldDeny)
			}
		})
	}
	m, err := acl.NewMatcher([]acl.Rule{{HostLists: []*acl.List{hostsL}}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if i := m.Match(r); i != -1 {
		t.Errorf("a route by a list never loaded is taken (%d)", i)
	}

	p := mustPolicy(t, acl.Config{Default: acl.Allow, Rules: []acl.Rule{{Name: "r", Action: acl.Deny, HostLists: []*acl.List{hostsL}}}})
	s, _, _ := acl.ParseList(strings.NewReader(".other.example\n"), acl.HostList)
	hostsL.Store(s)
	if allow, rule := p.Check(r); !allow || rule != acl.DefaultRule {
		t.Errorf("after loading a list without the host: %v %q", allow, rule)
	}
	if m.Match(acl.Request{Host: "a.other.example"}) != 0 {
		t.Error("the route does not match by the list loaded")
	}
	s, _, _ = acl.ParseList(strings.NewReader(".example.com\n"), acl.HostList)
	hostsL.Store(s)
	if allow, rule := p.Check(r); allow || rule != "r" {
		t.Errorf("after swapping in a list with the host: %v %q", allow, rule)
	}
	if _, err := acl.New(acl.Config{Rules: []acl.Rule{{Action: acl.Deny, HostLists: []*acl.List{clientsL}}}}); err == nil {
		t.Error("New takes a client list as a host list")
	}
}

// TestAudit checks report rules and audit mode: a request a report rule,
// or in audit mode any deny rule or a default of deny, would refuse is
// allowed and names the rule in WouldDeny, per address for a pending
// decision too; allow rules decide as before; a report rule takes no
// allow_private; and Audited shares the rules.
func TestAudit(t *testing.T) {
	cfg := acl.Config{Rules: []acl.Rule{
		{Name: "ok", Action: acl.Allow, Hosts: []string{"ok.example"}},
		{Name: "new-block", Action: acl.Report, Hosts: []string{".new.example", "10.0.0.0/8"}},
		{Name: "old-block", Action: acl.Deny, Hosts: []string{".old.example"}},
		{Name: "web", Action: acl.Allow, Ports: []string{"443"}},
	}}
	enforce := mustPolicy(t, cfg)
	audit := enforce.Audited()
	cfg.Audit = true
	for _, p := range []*acl.Policy{audit, mustPolicy(t, cfg)} {
		if !p.Auditing() || enforce.Auditing() {
			t.Fatal("Auditing is wrong")
		}
	}
	for _, tt := range []struct {
		host            string
		port            uint16
		enforceAllow    bool
		rule, wouldDeny string
		auditWould      string // WouldDeny in audit mode
	}{
		{"ok.example", 80, true, "ok", "", ""},
		{"www.new.example", 443, true, "new-block", "new-block", "new-block"},
		{"www.old.example", 443, false, "old-block", "", "old-block"},
		{"other.example", 443, true, "web", "", ""},
		{"other.example", 80, false, acl.DefaultRule, "", acl.DefaultRule},
	} {
		r := acl.Request{Host: tt.host, Port: tt.port}
		// A name the report rule's CIDR may match is decided once it
		// resolved, here to an address outside it.
		decide := func(p *acl.Policy) (bool, acl.Decision) {
			d := p.Decide(r)
			allow := d.Allow
			if d.Pending() {
				allow, _ = d.Permit(netip.MustParseAddr("192.0.2.1"))
			}
			return allow, d
		}
		allow, d := decide(enforce)
		if allow != tt.enforceAllow || d.Rule != tt.rule || d.WouldDeny != tt.wouldDeny {
			t.Errorf("enforce %s:%d = %v %q would deny %q, want %v %q %q", tt.host, tt.port, allow, d.Rule, d.WouldDeny, tt.enforceAllow, tt.rule, tt.wouldDeny)
		}
		allow, d = decide(audit)
		if !allow || d.Rule != tt.rule || d.WouldDeny != tt.auditWould {
			t.Errorf("audit %s:%d = %v %q would deny %q, want true %q %q", tt.host, tt.port, allow, d.Rule, d.WouldDeny, tt.rule, tt.auditWould)
		}
	}
	// A name the report rule's CIDR decides once resolved.
	d := enforce.Decide(acl.Request{Host: "intra.example", Port: 443})
	if !d.Pending() {
		t.Fatal("not pending")
	}
	if ok, private := d.Permit(netip.MustParseAddr("10.1.2.3")); !ok || private || d.WouldDeny != "new-block" {
		t.Errorf("Permit(10.1.2.3) = %v %v would deny %q, want true false new-block", ok, private, d.WouldDeny)
	}
	if ok, _ := d.Permit(netip.MustParseAddr("192.0.2.1")); !ok || d.WouldDeny != "" || d.Rule != "web" {
		t.Errorf("Permit(192.0.2.1) = %v would deny %q rule %q, want true \"\" web", ok, d.WouldDeny, d.Rule)
	}
	if !d.PermitUnresolved() || d.WouldDeny != "" {
		t.Errorf("PermitUnresolved would deny %q", d.WouldDeny)
	}
	if _, err := acl.New(acl.Config{Rules: []acl.Rule{{Action: acl.Report, AllowPrivate: []string{"10.0.0.0/8"}}}}); err == nil ||
		!strings.Contains(err.Error(), "allow_private") {
		t.Errorf("allow_private on a report rule: %v", err)
	}
}

// hostsOf returns n distinct names, "hN.dM.example", in a list's text.
func hostsOf(n int) []byte {
	var b bytes.Buffer
	for i := range n {
		fmt.Fprintf(&b, ".h%d.d%d.example\n", i, i%1000)
	}
	return b.Bytes()
}

// TestListMillion loads a million domains and checks what they cost: the
// set's own count of its bytes and the heap it keeps are both under
// 100 MB. (Their load time and a decision against them are benchmarks:
// BenchmarkParseList, BenchmarkDecideList.)
func TestListMillion(t *testing.T) {
	if testing.Short() || proxytest.Race {
		t.Skip("loads a million entries; its heap is not what the race detector is for")
	}
	src := hostsOf(1_000_000)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	s, st, err := acl.ParseList(bytes.NewReader(src), acl.HostList)
	if err != nil || st.Entries != 1_000_000 || st.Bad != 0 {
		t.Fatalf("ParseList: %v, %+v", err, st)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	kept := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("a million names: the set counts %d MB, the heap kept %d MB", s.Bytes()>>20, kept>>20)
	if s.Bytes() > 100<<20 || kept > 100<<20 {
		t.Errorf("a million names cost %d MB (set) and %d MB (heap), want under 100 MB", s.Bytes()>>20, kept>>20)
	}
	l := acl.NewList("million", acl.HostList)
	l.Store(s)
	p := mustPolicy(t, acl.Config{Default: acl.Allow, Rules: []acl.Rule{{Name: "big", Action: acl.Deny, HostLists: []*acl.List{l}}}})
	if allow, _ := p.Check(acl.Request{Host: "www.h999999.d999.example", Port: 443}); allow {
		t.Error("the last name is not matched")
	}
	if allow, _ := p.Check(acl.Request{Host: "h1000000.d0.example", Port: 443}); !allow {
		t.Error("a name not listed is matched")
	}
	runtime.KeepAlive(src)
}

// BenchmarkParseList loads a list of a million domains (the issue's
// bound: under 5 s) and reports what one set costs: its own count of its
// bytes (MB/set) and the heap it keeps after a collection (MB-heap/set,
// measured once before the timed loop; the
// issue's bound: under 100 MB).
func BenchmarkParseList(b *testing.B) {
	src := hostsOf(1_000_000)
	kept := heapKept(b, src)
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		s, _, err := acl.ParseList(bytes.NewReader(src), acl.HostList)
		if err != nil || s.Len() != 1_000_000 {
			b.Fatal(err)
		}
		b.ReportMetric(float64(s.Bytes())/(1<<20), "MB/set")
	}
	b.ReportMetric(float64(kept)/(1<<20), "MB-heap/set") // after the loop, which clears what was reported before it
}

// heapKept returns the bytes of heap a set parsed from src keeps after a
// collection.
func heapKept(tb testing.TB, src []byte) int64 {
	tb.Helper()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s, _, err := acl.ParseList(bytes.NewReader(src), acl.HostList)
	if err != nil {
		tb.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(s)
	return int64(after.HeapAlloc) - int64(before.HeapAlloc)
}

// BenchmarkDecideList decides requests against a deny rule whose hosts
// are a list of 1,000 or 1,000,000 domains (the bound: under
// 1 µs a decision), for a name under a listed domain (found at its
// third lookup), a name listed nowhere (four lookups, all misses), and
// 65,536 names under listed domains spread over the list in turn (the
// table's memory out of the CPU's caches, as under real traffic).
func BenchmarkDecideList(b *testing.B) {
	for _, n := range []int{1_000, 1_000_000} {
		s, _, err := acl.ParseList(bytes.NewReader(hostsOf(n)), acl.HostList)
		if err != nil {
			b.Fatal(err)
		}
		l := acl.NewList("bench", acl.HostList)
		l.Store(s)
		p := mustPolicy(b, acl.Config{Default: acl.Allow, Rules: []acl.Rule{
			{Name: "block", Action: acl.Deny, HostLists: []*acl.List{l}},
		}})
		for _, c := range []struct {
			name string
			host string
			deny bool
		}{
			{"hit", fmt.Sprintf("cdn.www.h%d.d%d.example", n/2, (n/2)%1000), true},
			{"miss", "cdn.www.unlisted.example", false},
		} {
			b.Run(fmt.Sprintf("entries=%d/%s", n, c.name), func(b *testing.B) {
				r := acl.Request{Client: outside, Host: c.host, Port: 443, Method: "CONNECT", Protocol: acl.Connect}
				b.ReportAllocs()
				for b.Loop() {
					if d := p.Decide(r); d.Allow == c.deny {
						b.Fatal("wrong decision")
					}
				}
			})
		}
		b.Run(fmt.Sprintf("entries=%d/spread", n), func(b *testing.B) {
			reqs := make([]acl.Request, 1<<16)
			for i := range reqs {
				j := (i * 7919) % n
				reqs[i] = acl.Request{Client: outside, Host: fmt.Sprintf("cdn.www.h%d.d%d.example", j, j%1000), Port: 443, Protocol: acl.Connect}
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if p.Decide(reqs[i&(len(reqs)-1)]).Allow {
					b.Fatal("wrong decision")
				}
				i++
			}
		})
	}
}
