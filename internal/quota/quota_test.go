package quota

import (
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// clock is a settable clock for a Tracker.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

func mustLoc(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Skipf("time zone %s: %v", name, err)
	}
	return loc
}

func TestWindow(t *testing.T) {
	paris := mustLoc(t, "Europe/Paris")
	ny := mustLoc(t, "America/New_York")
	at := func(loc *time.Location, y int, mo time.Month, d, h, m int) time.Time {
		return time.Date(y, mo, d, h, m, 0, 0, loc)
	}
	tests := []struct {
		name       string
		period     Period
		reset      time.Duration
		loc        *time.Location
		now        time.Time
		start, end time.Time
	}{
		{"day at midnight UTC", Day, 0, time.UTC, at(time.UTC, 2026, 12, 1, 15, 0),
			at(time.UTC, 2026, 12, 1, 0, 0), at(time.UTC, 2026, 12, 2, 0, 0)},
		{"day before its reset time", Day, 6 * time.Hour, time.UTC, at(time.UTC, 2026, 12, 1, 5, 59),
			at(time.UTC, 2026, 11, 30, 6, 0), at(time.UTC, 2026, 12, 1, 6, 0)},
		{"day at its reset instant", Day, 6 * time.Hour, time.UTC, at(time.UTC, 2026, 12, 1, 6, 0),
			at(time.UTC, 2026, 12, 1, 6, 0), at(time.UTC, 2026, 12, 2, 6, 0)},
		{"day in Paris, UTC evening is the next day", Day, 0, paris, at(time.UTC, 2026, 12, 1, 23, 30),
			at(paris, 2026, 12, 2, 0, 0), at(paris, 2026, 12, 3, 0, 0)},
		{"day across the spring change is 23h", Day, 0, paris, at(paris, 2026, 3, 29, 12, 0),
			at(paris, 2026, 3, 29, 0, 0), at(paris, 2026, 3, 30, 0, 0)},
		{"day across the autumn change is 25h", Day, 0, ny, at(ny, 2026, 11, 1, 12, 0),
			at(ny, 2026, 11, 1, 0, 0), at(ny, 2026, 11, 2, 0, 0)},
		{"hour at minute 30", Hour, 30 * time.Minute, time.UTC, at(time.UTC, 2026, 12, 1, 15, 10),
			at(time.UTC, 2026, 12, 1, 14, 30), at(time.UTC, 2026, 12, 1, 15, 30)},
		{"hour ignores the reset's hours", Hour, 5*time.Hour + 15*time.Minute, time.UTC, at(time.UTC, 2026, 12, 1, 15, 20),
			at(time.UTC, 2026, 12, 1, 15, 15), at(time.UTC, 2026, 12, 1, 16, 15)},
		{"month", Month, 0, time.UTC, at(time.UTC, 2026, 12, 31, 23, 59),
			at(time.UTC, 2026, 12, 1, 0, 0), at(time.UTC, 2027, 1, 1, 0, 0)},
		{"month before its first reset", Month, 8 * time.Hour, paris, at(paris, 2026, 12, 1, 7, 0),
			at(paris, 2026, 11, 1, 8, 0), at(paris, 2026, 12, 1, 8, 0)},
		{"month in New York from UTC", Month, 0, ny, at(time.UTC, 2027, 1, 1, 2, 0),
			at(ny, 2026, 12, 1, 0, 0), at(ny, 2027, 1, 1, 0, 0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start, end := tt.period.Window(tt.now, tt.reset, tt.loc)
			if !start.Equal(tt.start) || !end.Equal(tt.end) {
				t.Errorf("Window(%v) = [%v, %v), want [%v, %v)", tt.now, start, end, tt.start, tt.end)
			}
			if tt.now.Before(start) || !tt.now.Before(end) {
				t.Errorf("now %v is outside [%v, %v)", tt.now, start, end)
			}
		})
	}
}

// TestResetAtBoundary checks that a spent quota comes back when its
// window ends, in its time zone, and not a minute before.
func TestResetAtBoundary(t *testing.T) {
	paris := mustLoc(t, "Europe/Paris")
	clk := &clock{t: time.Date(2026, 12, 1, 23, 58, 0, 0, paris)}
	tr := New(Config{Now: clk.now, Rules: []Rule{{Name: "daily", Users: []string{"*"}, Period: Day, Loc: paris, Requests: 2, Bytes: 1000}}})
	u := tr.User("alice")
	for i := range 2 {
		if !u.Begin() {
			t.Fatalf("request %d of a quota of 2 refused", i+1)
		}
	}
	if u.Begin() {
		t.Fatal("third request of a quota of 2 granted")
	}
	clk.set(time.Date(2026, 12, 1, 23, 59, 59, 0, paris))
	if u.Begin() {
		t.Fatal("granted before the reset")
	}
	clk.set(time.Date(2026, 12, 2, 0, 0, 0, 0, paris))
	if !u.Begin() {
		t.Fatal("refused after the reset at midnight in Paris")
	}
	if u.AddBytes(999) != true {
		t.Error("AddBytes(999) of 1000: spent")
	}
	if u.AddBytes(1) {
		t.Error("AddBytes reaching the quota: not spent")
	}
	if u.Begin() {
		t.Error("request granted with the byte quota spent")
	}
	st := tr.Status("alice")
	if len(st) != 1 || st[0].BytesUsed != 1000 || st[0].RequestsUsed != 1 ||
		!st[0].Reset.Equal(time.Date(2026, 12, 3, 0, 0, 0, 0, paris)) {
		t.Errorf("Status = %+v", st)
	}
}

// TestScopes checks that users count alone and groups together.
func TestScopes(t *testing.T) {
	tr := New(Config{
		Groups: map[string][]string{"ci": {"bob", "carol"}},
		Rules: []Rule{
			{Name: "each", Users: []string{"alice", "bob"}, Requests: 1},
			{Name: "ci", Groups: []string{"ci"}, Requests: 2},
		},
	})
	if tr.User("dave") != nil {
		t.Error("a user no rule names has counters")
	}
	alice, bob, carol := tr.User("alice"), tr.User("bob"), tr.User("carol")
	if !alice.Begin() || alice.Begin() {
		t.Error("alice: want one request")
	}
	if !bob.Begin() {
		t.Error("bob's first request refused")
	}
	if bob.Begin() {
		t.Error("bob's second request granted past his own quota")
	}
	if !carol.Begin() {
		t.Error("carol's first request refused")
	}
	if carol.Begin() {
		t.Error("carol's second request granted: the group's two are spent (bob's and hers)")
	}
}

// TestScopeMemberListedTwice checks that a member listed twice in a
// group counts once in it: the group's quota of two requests takes two
// of hers, not one counted twice.
func TestScopeMemberListedTwice(t *testing.T) {
	tr := New(Config{
		Groups: map[string][]string{"ci": {"carol", "carol"}},
		Rules:  []Rule{{Name: "ci", Groups: []string{"ci"}, Requests: 2}},
	})
	carol := tr.User("carol")
	if !carol.Begin() || !carol.Begin() {
		t.Error("carol's second request refused: her first counted twice")
	}
	if carol.Begin() {
		t.Error("carol's third request granted past the group's two")
	}
	if st := tr.Status("carol"); len(st) != 1 || st[0].Scope != "group:ci" {
		t.Errorf("Status = %+v, want one group:ci quota", st)
	}
}

func TestMeter(t *testing.T) {
	tr := New(Config{Rules: []Rule{{Name: "b", Users: []string{"*"}, Bytes: 100}}})
	u := tr.User("alice")
	if !u.LimitsBytes() {
		t.Fatal("LimitsBytes false with a byte quota")
	}
	m := u.Meter()
	if !m.Moved(0, 60) {
		t.Error("60 of 100: stopped")
	}
	if m.Moved(1, 50) {
		t.Error("110 of 100: not stopped")
	}
	if m.Charged() != 110 {
		t.Errorf("Charged = %d, want 110", m.Charged())
	}
}

// TestMeterDatagram checks that a flow's datagrams are charged to the
// quota a batch at a time, that the datagram whose batch finds the
// quota spent is refused, as every one after it, and that a quota spent
// elsewhere stops the flow at its next batch.
func TestMeterDatagram(t *testing.T) {
	const quota = 3*DatagramBatch + 100
	tr := New(Config{Rules: []Rule{{Name: "b", Users: []string{"*"}, Bytes: quota}}})
	u := tr.User("alice")
	m := u.Meter()
	const n = 1200
	sent := int64(0)
	for m.Datagram(n) {
		sent += n
		if sent > 2*quota {
			t.Fatalf("%d bytes of datagrams through a quota of %d", sent, quota)
		}
		if held := sent - m.Charged(); held < 0 || held >= DatagramBatch {
			t.Fatalf("after %d bytes %d charged: want less than a batch held", sent, m.Charged())
		}
	}
	if sent < quota-DatagramBatch || sent >= quota+DatagramBatch {
		t.Errorf("%d bytes sent; want within a batch (%d) of the quota %d", sent, DatagramBatch, quota)
	}
	if !m.Stopped() || m.Datagram(1) {
		t.Error("not stopped after the quota was spent")
	}

	// A quota spent by another of the user's requests: the next batch stops.
	tr = New(Config{Rules: []Rule{{Name: "b", Users: []string{"*"}, Bytes: 10 * DatagramBatch}}})
	u = tr.User("bob")
	m = u.Meter()
	if !m.Datagram(n) {
		t.Fatal("the first datagram refused")
	}
	u.AddBytes(10 * DatagramBatch)
	sent = n
	for m.Datagram(n) {
		sent += n
	}
	if sent >= DatagramBatch+n {
		t.Errorf("%d bytes sent after the quota was spent elsewhere; want less than a batch", sent)
	}
	m.Reset(u)
	if m.Charged() != 0 || m.Stopped() {
		t.Error("Reset kept the meter's state")
	}
}

// TestMeterDatagramCrossing checks that the datagram whose batch crosses
// the quota is sent: the flow then moves at least its quota before it
// ends. Before, it was refused, and the flow's end counted what was sent
// (less than the batch charged): its user stayed under the quota and was
// let in again.
func TestMeterDatagramCrossing(t *testing.T) {
	const n = 1200
	const perBatch = (DatagramBatch + n - 1) / n * n // a batch's bytes
	const quota = 3*perBatch - n/2                   // crossed by a batch's last datagram
	tr := New(Config{Rules: []Rule{{Name: "b", Users: []string{"*"}, Bytes: quota}}})
	u := tr.User("alice")
	m := u.Meter()
	sent := int64(0)
	for m.Datagram(n) {
		sent += n
		if sent > 2*quota {
			t.Fatalf("%d bytes of datagrams through a quota of %d", sent, quota)
		}
	}
	u.AddBytes(sent - m.Charged()) // the flow's end (gate's Finish)
	if sent < quota {
		t.Errorf("%d bytes sent, under the quota of %d", sent, quota)
	}
	if st := tr.Status("alice"); st[0].BytesUsed != sent {
		t.Errorf("%d bytes used, want the %d sent", st[0].BytesUsed, sent)
	}
}

// TestMeterTake checks Take and Done, the metering of a tunnel that
// relays its bytes itself: the bytes that reach the quota are allowed and
// none past it, a quota spent elsewhere allows nothing, and the tunnel is
// ended by the Done of the last Take whose bytes were on their way, not
// by the direction that found the quota reached.
func TestMeterTake(t *testing.T) {
	const quota = 100_000
	tracker := func() *User {
		return New(Config{Rules: []Rule{{Name: "b", Users: []string{"*"}, Bytes: quota}}}).User("alice")
	}
	t.Run("one way", func(t *testing.T) {
		u := tracker()
		m := u.Meter()
		sent := int64(0)
		for i := 0; ; i++ {
			k := m.Take(16 << 10)
			sent += k
			end := m.Done()
			if k < 16<<10 {
				if !end {
					t.Fatal("the Take that reached the quota: Done did not end the tunnel")
				}
				break
			}
			if end || i > 10 {
				t.Fatalf("ended after %d bytes", sent)
			}
		}
		if sent != quota || m.Charged() != quota || !m.Stopped() {
			t.Errorf("%d bytes allowed, %d charged, stopped %v; want the quota, %d", sent, m.Charged(), m.Stopped(), quota)
		}
		if k := m.Take(1); k != 0 || !m.Done() {
			t.Errorf("after the quota: Take allowed %d", k)
		}
	})
	t.Run("both ways", func(t *testing.T) {
		u := tracker()
		m := u.Meter()
		down := m.Take(60_000) // on its way
		up := m.Take(60_000)   // reaches the quota
		if down != 60_000 || up != 40_000 {
			t.Fatalf("allowed %d down, %d up; want 60000, 40000", down, up)
		}
		if m.Done() {
			t.Fatal("the direction that reached the quota ended the tunnel while the other's bytes were on their way")
		}
		if k := m.Take(1); k != 0 {
			t.Fatalf("allowed %d past the quota", k)
		}
		if m.Done() {
			t.Fatal("a direction refused ended the tunnel while the other's bytes were on their way")
		}
		if !m.Done() {
			t.Fatal("the last Done did not end the tunnel")
		}
		if m.Charged() != quota {
			t.Errorf("charged %d, want %d", m.Charged(), quota)
		}
	})
	t.Run("spent elsewhere", func(t *testing.T) {
		u := tracker()
		m := u.Meter()
		u.AddBytes(quota)
		if k := m.Take(10); k != 0 || !m.Done() || m.Charged() != 0 {
			t.Errorf("a spent quota: allowed %d, charged %d", k, m.Charged())
		}
		m.Reset(u)
		if m.Stopped() || m.Charged() != 0 {
			t.Error("Reset kept the meter's state")
		}
	})
}

// TestSettle checks the sync of a cluster: pending counts are handed
// over, the base becomes the total, and counts handed over to a sync
// that did not confirm them stay counted and are handed over again.
func TestSettle(t *testing.T) {
	tr := New(Config{Rules: []Rule{{Name: "b", Users: []string{"*"}, Bytes: 100}}})
	u := tr.User("alice")
	u.AddBytes(30)
	c := tr.Counters()[0]
	start, b, _ := c.Take()
	if b != 30 {
		t.Fatalf("Take: %d bytes, want 30", b)
	}
	if got := c.Status().BytesUsed; got != 30 {
		t.Errorf("used during the sync = %d, want 30", got)
	}
	u.AddBytes(5)
	c.Settle(start, b, 0, 90, 0) // another instance's 60 and these 30
	if got := c.Status().BytesUsed; got != 95 {
		t.Errorf("used after Settle = %d, want 95", got)
	}
	// A sync that fails: no Settle. The 5 stay counted, and go with
	// the next sync's 2.
	if _, b, _ = c.Take(); b != 5 {
		t.Fatalf("Take: %d bytes, want 5", b)
	}
	if got := c.Status().BytesUsed; got != 95 {
		t.Errorf("used after a failed sync = %d, want 95", got)
	}
	u.AddBytes(2)
	start, b, _ = c.Take()
	if b != 7 {
		t.Fatalf("Take after a failed sync: %d bytes, want 7", b)
	}
	u.AddBytes(1)
	c.Settle(start, b, 0, 97, 0)
	if got := c.Status().BytesUsed; got != 98 {
		t.Errorf("used after Settle = %d, want 98", got)
	}
	if u.AddBytes(2) {
		t.Error("100 of 100: not spent")
	}
}

// TestLoader checks a counter's first totals: the first requests of a
// counter wait for its loader's totals and are checked against them;
// a loader that does not answer holds them at most its wait, after which
// nothing waits; totals that come after a Settle are ignored.
func TestLoader(t *testing.T) {
	// Long enough that a loaded machine's pauses stay well within half
	// of it (a Begin that does not wait is checked against wait/2).
	const wait = 2 * time.Second
	tr := New(Config{Rules: []Rule{{Name: "r", Users: []string{"*"}, Requests: 6}}})
	made := make(chan *Counter, 4)
	tr.SetLoader(func(c *Counter) { made <- c }, wait)

	// Loaded while a request waits: 4 used elsewhere, 2 left.
	u := tr.User("alice")
	c := <-made
	begun := make(chan bool)
	go func() { begun <- u.Begin() }()
	select {
	case <-begun:
		t.Fatal("Begin did not wait for the counter's totals")
	case <-time.After(20 * time.Millisecond):
	}
	start, _ := c.Window()
	c.Loaded(start.UnixNano(), 0, 4)
	if !<-begun {
		t.Fatal("first request refused with 4 of 6 used")
	}
	if !u.Begin() || u.Begin() {
		t.Errorf("after 4 of 6 used elsewhere: used %d, want the 6th granted and the 7th refused", c.Status().RequestsUsed)
	}

	// A loader that never answers: the first request waits its bound,
	// the next ones not at all.
	u = tr.User("bob")
	<-made
	t0 := time.Now()
	if !u.Begin() {
		t.Fatal("bob's first request refused")
	}
	if d := time.Since(t0); d < wait || d > 5*wait {
		t.Errorf("first request with no totals waited %v, want about %v", d, wait)
	}
	t0 = time.Now()
	u.Begin()
	if d := time.Since(t0); d > wait/2 {
		t.Errorf("second request waited %v", d)
	}

	// Totals fetched before a Settle and delivered after it are older:
	// ignored.
	u = tr.User("carol")
	c = <-made
	c.Release()
	u.Begin()
	start2, _, r := c.Take()
	c.Settle(start2, 0, r, 0, 3)
	c.Loaded(start2, 0, 1)
	if got := c.Status().RequestsUsed; got != 3 {
		t.Errorf("used after a Settle then older totals = %d, want 3", got)
	}
}

// TestSaveLoad checks the round trip of the state file: a restart within
// the window restores the use, one after it starts afresh.
func TestSaveLoad(t *testing.T) {
	clk := &clock{t: time.Date(2026, 12, 15, 10, 0, 0, 0, time.UTC)}
	rules := []Rule{
		{Name: "monthly", Users: []string{"*"}, Period: Month, Bytes: 1 << 30},
		{Name: "ci", Groups: []string{"ci"}, Period: Day, Requests: 10},
	}
	groups := map[string][]string{"ci": {"bob"}}
	path := filepath.Join(t.TempDir(), "quota.json")
	tr := New(Config{Now: clk.now, Rules: rules, Groups: groups})
	tr.User("alice").AddBytes(1234)
	tr.User("bob").Begin()
	tr.User("bob").Begin()
	if err := tr.Save(path); err != nil {
		t.Fatal(err)
	}

	tr2 := New(Config{Now: clk.now, Rules: rules, Groups: groups})
	if n, err := tr2.Load(path); err != nil || n != 3 {
		t.Fatalf("Load = %d, %v; want 3 counters", n, err)
	}
	if st := tr2.Status("alice"); st[0].BytesUsed != 1234 {
		t.Errorf("alice after a restart: %d bytes used, want 1234", st[0].BytesUsed)
	}
	st := tr2.Status("bob")
	if len(st) != 2 || st[1].Scope != "group:ci" || st[1].RequestsUsed != 2 {
		t.Errorf("bob after a restart: %+v", st)
	}

	clk.set(time.Date(2026, 12, 16, 0, 0, 1, 0, time.UTC)) // the day rolled, not the month
	tr3 := New(Config{Now: clk.now, Rules: rules, Groups: groups})
	if n, err := tr3.Load(path); err != nil || n != 2 {
		t.Fatalf("Load the next day = %d, %v; want 2 (the month's)", n, err)
	}
	if st := tr3.Status("bob"); st[1].RequestsUsed != 0 || st[0].BytesUsed != 0 {
		t.Errorf("bob the next day: %+v", st)
	}
	if st := tr3.Status("alice"); st[0].BytesUsed != 1234 {
		t.Errorf("alice the next day: %d bytes, want the month's 1234", st[0].BytesUsed)
	}
	if n, err := New(Config{Rules: rules}).Load(filepath.Join(t.TempDir(), "none.json")); n != 0 || err != nil {
		t.Errorf("Load of a missing file = %d, %v", n, err)
	}
}

// TestBeginNoAllocs checks that the request path's quota check does not
// allocate.
func TestBeginNoAllocs(t *testing.T) {
	for _, loader := range []bool{false, true} {
		tr := New(Config{Rules: []Rule{{Name: "d", Users: []string{"*"}, Bytes: 1 << 60, Requests: 1 << 60}}})
		if loader { // a cluster's: once the totals are in, nothing waits
			tr.SetLoader(func(c *Counter) { c.Loaded(c.start, 0, 0) }, time.Second)
		}
		tr.User("alice").Begin()
		if n := testing.AllocsPerRun(1000, func() {
			u := tr.User("alice")
			u.Begin()
			u.AddBytes(1024)
		}); n != 0 {
			t.Errorf("User+Begin+AddBytes (loader %v): %v allocations, want 0", loader, n)
		}
	}
}

func BenchmarkBegin(b *testing.B) {
	tr := New(Config{Rules: []Rule{{Name: "d", Users: []string{"*"}, Bytes: 1 << 60, Requests: 1 << 60}}})
	u := tr.User("alice")
	b.ReportAllocs()
	for b.Loop() {
		u.Begin()
		u.AddBytes(1024)
	}
}

// TestSetGroups checks that a reload's groups apply to the users
// resolved after it, and that the groups' counts stay.
func TestSetGroups(t *testing.T) {
	tr := New(Config{Groups: map[string][]string{"ci": {"bob"}}, Rules: []Rule{{Name: "ci", Groups: []string{"ci"}, Requests: 2}}})
	if !tr.User("bob").Begin() {
		t.Fatal("bob refused")
	}
	if tr.User("carol") != nil {
		t.Fatal("carol counted in ci before she is a member")
	}
	tr.SetGroups(map[string][]string{"ci": {"bob", "carol"}})
	if !tr.User("carol").Begin() {
		t.Fatal("carol refused: the group's second request")
	}
	if tr.User("carol").Begin() || tr.User("bob").Begin() {
		t.Error("a third request of the group granted")
	}
	tr.SetGroups(nil)
	if tr.User("bob") != nil {
		t.Error("bob still counted in ci after leaving it")
	}
}

// TestStatusCreatesNothing checks that looking a user up (the admin
// endpoint GET /quota?user=NAME) makes no counter and remembers no name:
// 5,000 lookups of names never seen leave the tracker as it was, and a
// user's status still shows what its requests counted.
func TestStatusCreatesNothing(t *testing.T) {
	clk := &clock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	tr := New(Config{Now: clk.now, Groups: map[string][]string{"staff": {"alice"}},
		Rules: []Rule{{Name: "daily", Users: []string{"*"}, Period: Day, Requests: 5},
			{Name: "team", Groups: []string{"staff"}, Period: Day, Bytes: 1000}}})
	if !tr.User("alice").Begin() {
		t.Fatal("alice's first request refused")
	}
	before := len(tr.Counters())
	for i := range 5000 {
		name := "nobody-" + strconv.Itoa(i)
		st := tr.Status(name)
		if len(st) != 1 || st[0].Scope != name || st[0].RequestsUsed != 0 || st[0].RequestsLimit != 5 {
			t.Fatalf("Status(%s) = %+v, want the daily quota unused", name, st)
		}
	}
	if after := len(tr.Counters()); after != before {
		t.Errorf("5000 lookups made %d counters (%d before, %d after)", after-before, before, after)
	}
	tr.mu.RLock()
	names := len(tr.users)
	tr.mu.RUnlock()
	if names != 1 {
		t.Errorf("the tracker remembers %d names after the lookups, want 1 (alice)", names)
	}
	st := tr.Status("alice")
	if len(st) != 2 || st[0].RequestsUsed != 1 || st[1].Scope != "group:staff" {
		t.Errorf("Status(alice) = %+v, want daily with 1 request and the staff group's quota", st)
	}
	if st := tr.Status(""); st != nil {
		t.Errorf("Status(\"\") = %+v, want none", st)
	}
}

// TestReset checks that Reset zeroes one counter in its window, so
// that a spent quota is granted again, leaves the others alone, and
// reports a counter that does not exist.
func TestReset(t *testing.T) {
	tr := New(Config{Rules: []Rule{{Name: "r", Users: []string{"*"}, Requests: 2, Bytes: 100}}})
	alice, bob := tr.User("alice"), tr.User("bob")
	for range 2 {
		if !alice.Begin() || !bob.Begin() {
			t.Fatal("a request within the quota was refused")
		}
	}
	alice.AddBytes(40)
	if alice.Begin() {
		t.Fatal("a third request of a quota of 2 was granted")
	}
	if !tr.Reset("r", "alice") {
		t.Fatal("Reset of alice's counter reported none")
	}
	for _, tc := range []struct {
		rule, scope string
		want        bool
	}{{"r", "carol", false}, {"other", "alice", false}, {"r", "", false}} {
		if tr.Reset(tc.rule, tc.scope) != tc.want {
			t.Errorf("Reset(%q, %q) = %v, want %v", tc.rule, tc.scope, !tc.want, tc.want)
		}
	}
	st := tr.Status("alice")[0]
	if st.RequestsUsed != 0 || st.BytesUsed != 0 {
		t.Errorf("alice after Reset: %+v, want nothing used", st)
	}
	if !alice.Begin() {
		t.Error("alice's request after Reset was refused")
	}
	if got := tr.Status("bob")[0].RequestsUsed; got != 2 {
		t.Errorf("bob's requests after alice's Reset = %d, want 2", got)
	}
	var nt *Tracker
	if nt.Reset("r", "alice") {
		t.Error("Reset on a nil Tracker reported a counter")
	}
}
