package metrics

import (
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestRead checks that Read sums each protocol's series over its
// listeners, reads the parents' series (and forgets a parent the
// configuration dropped) and the open tunnels, and that Users reads the
// per-user series, _other only once it counted something.
func TestRead(t *testing.T) {
	m := New(Config{PerUser: true, MaxUsers: 2})
	a, b, s := m.Listener("a", "http"), m.Listener("b", "http"), m.Listener("a", "socks5")
	a.Accepted()
	a.Accepted()
	a.Closed()
	b.Accepted()
	a.Request(200, 10, 100)
	b.Request(407, 0, 0)
	b.Request(429, 0, 0)
	a.Bytes(5, 50)
	a.TunnelOpened()
	a.AuthFailed()
	b.AuthChallenged()
	b.ACLDenied()
	s.Accepted()
	s.Request(200, 0, 0)
	s.TunnelOpened()
	s.Bytes(7, 70)

	p := m.Parent("squid")
	p.Dialed(10*time.Millisecond, true)
	p.Dialed(30*time.Millisecond, true)
	p.Dialed(time.Second, false)
	p.Health(false)
	m.Parent("gone").Dialed(time.Millisecond, true)
	m.ForgetParent("gone")

	r := m.Read()
	if r.TunnelsOpen != -1 {
		t.Errorf("TunnelsOpen before SetTunnelsOpen = %d, want -1", r.TunnelsOpen)
	}
	want := map[string]Counts{
		"http": {Accepted: 3, Open: 2, Requests: 3, Status: [6]uint64{2: 1, 4: 2}, Tunnels: 1,
			BytesUp: 15, BytesDown: 150, AuthFailed: 1, AuthMissing: 1, ACLDenied: 1},
		"socks5": {Accepted: 1, Open: 1, Requests: 1, Status: [6]uint64{2: 1}, Tunnels: 1, BytesUp: 7, BytesDown: 70},
	}
	if diff := cmp.Diff(want, r.Protocols); diff != "" {
		t.Errorf("Protocols (-want +got):\n%s", diff)
	}
	if tot := r.Total(); tot.Requests != 4 || tot.BytesDown != 220 || tot.Open != 3 {
		t.Errorf("Total = %+v, want 4 requests, 220 bytes down, 3 open", tot)
	}
	if len(r.Parents) != 1 {
		t.Fatalf("Parents = %+v, want squid alone", r.Parents)
	}
	pr := r.Parents[0]
	if pr.Name != "squid" || pr.Up || pr.Requests != 3 || pr.Failures != 1 || pr.DialOK != 2 || pr.DialErr != 1 ||
		pr.DialOKSeconds < 0.039 || pr.DialOKSeconds > 0.041 {
		t.Errorf("squid = %+v, want down, 3 requests, 1 failure, 2 dials ok in 40ms, 1 failed", pr)
	}

	m.SetTunnelsOpen(func() int { return 7 })
	if r := m.Read(); r.TunnelsOpen != 7 {
		t.Errorf("TunnelsOpen = %d, want 7", r.TunnelsOpen)
	}

	users := func() []UserReading {
		u := m.Users()
		sort.Slice(u, func(i, j int) bool { return u[i].Name < u[j].Name })
		return u
	}
	m.User("alice").Request(1, 2)
	m.User("bob").Request(0, 0)
	if diff := cmp.Diff([]UserReading{{Name: "alice", Requests: 1, BytesUp: 1, BytesDown: 2}, {Name: "bob", Requests: 1}}, users()); diff != "" {
		t.Errorf("Users (-want +got):\n%s", diff)
	}
	m.User("carol").Bytes(3, 4) // past max_users: _other
	if got := users(); len(got) != 3 || got[0].Name != OtherUser || got[0].BytesUp != 3 {
		t.Errorf("Users after a third user = %+v, want _other with 3 bytes up", got)
	}
	if u := New(Config{}).Users(); u != nil {
		t.Errorf("Users without per-user series = %v, want none", u)
	}
	var nilM *Metrics
	if r := nilM.Read(); r.TunnelsOpen != -1 || len(r.Protocols) != 0 || nilM.PerUser() || nilM.Users() != nil {
		t.Errorf("nil Metrics: Read = %+v", r)
	}
}
