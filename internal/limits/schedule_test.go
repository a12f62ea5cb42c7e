package limits_test

import (
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/limits"
)

// day returns the bit of weekdays for a Schedule's Days.
func days(ds ...time.Weekday) uint8 {
	var m uint8
	for _, d := range ds {
		m |= 1 << d
	}
	return m
}

func who(users ...string) acl.Selector { return acl.NewSelector(acl.Who{Users: users}, nil, nil) }

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// TestScheduleHolds checks a schedule's window: days, hours in its zone,
// a window across midnight belonging to the day it starts on, and the
// zero values meaning every day, the whole day.
func TestScheduleHolds(t *testing.T) {
	paris := mustZone(t, "Europe/Paris")
	office := limits.Schedule{Days: days(time.Monday, time.Tuesday, time.Wednesday, time.Thursday, time.Friday),
		Start: 9 * time.Hour, End: 18 * time.Hour, Loc: paris}
	night := limits.Schedule{Days: days(time.Friday), Start: 22 * time.Hour, End: 6 * time.Hour}
	always := limits.Schedule{}
	full := limits.Schedule{Days: days(time.Sunday), End: 24 * time.Hour}
	// 2026-03-02 is a Monday; Paris is UTC+1 until 29 March.
	at := func(d, h, m int, loc *time.Location) time.Time { return time.Date(2026, 3, d, h, m, 0, 0, loc) }
	for _, tt := range []struct {
		name string
		s    limits.Schedule
		t    time.Time
		want bool
	}{
		{"office: Monday 09:00 Paris", office, at(2, 9, 0, paris), true},
		{"office: Monday 08:59 Paris", office, at(2, 8, 59, paris), false},
		{"office: Monday 17:59 Paris", office, at(2, 17, 59, paris), true},
		{"office: Monday 18:00 Paris", office, at(2, 18, 0, paris), false},
		{"office: Monday 08:30 UTC is 09:30 in Paris", office, at(2, 8, 30, time.UTC), true},
		{"office: Monday 17:30 UTC is 18:30 in Paris", office, at(2, 17, 30, time.UTC), false},
		{"office: Saturday noon", office, at(7, 12, 0, paris), false},
		{"office: after the change to summer time, 09:00 is still 09:00", office, at(30, 9, 0, paris), true},
		{"night: Friday 23:00", night, at(6, 23, 0, time.UTC), true},
		{"night: Saturday 05:59, the Friday's window", night, at(7, 5, 59, time.UTC), true},
		{"night: Saturday 06:00", night, at(7, 6, 0, time.UTC), false},
		{"night: Saturday 23:00", night, at(7, 23, 0, time.UTC), false},
		{"night: Friday 05:00, Thursday's window", night, at(6, 5, 0, time.UTC), false},
		{"night: Thursday 23:00", night, at(5, 23, 0, time.UTC), false},
		{"always", always, at(4, 3, 17, time.UTC), true},
		{"whole Sunday: 00:00", full, at(8, 0, 0, time.UTC), true},
		{"whole Sunday: 23:59", full, at(8, 23, 59, time.UTC), true},
		{"whole Sunday: Monday 00:00", full, at(9, 0, 0, time.UTC), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.s.Holds(tt.t); got != tt.want {
				t.Errorf("Holds(%v) = %v, want %v", tt.t, got, tt.want)
			}
		})
	}
}

// TestThrottleSchedules checks that a user's byte bucket paces at the
// rate of the first schedule selecting the user whose window holds, else
// at user_bytes_per_second, and that the same bucket (every open
// connection of the user shares it) changes rate at a window's start and
// end, at the first Take after it.
func TestThrottleSchedules(t *testing.T) {
	paris := mustZone(t, "Europe/Paris")
	weekdays := days(time.Monday, time.Tuesday, time.Wednesday, time.Thursday, time.Friday)
	l, clk := newLimiter(t, limits.Config{
		UserBytesPerSecond: 1000,
		Schedules: []limits.Schedule{
			{Who: who("alice"), Days: weekdays, Start: 9 * time.Hour, End: 18 * time.Hour, Loc: paris, BytesPerSecond: 100, Burst: 100},
			{Who: who("alice"), Days: weekdays, Start: 12 * time.Hour, End: 14 * time.Hour, Loc: paris, BytesPerSecond: 7, Burst: 7},
			{Who: who("*"), Days: days(time.Saturday), BytesPerSecond: 5000, Burst: 10000},
		},
	})
	// Monday 2 March 2026, 08:59 in Paris.
	clk.advance(time.Date(2026, 3, 2, 8, 59, 0, 0, paris).Sub(clk.now()))
	alice, bob := l.Throttle("alice"), l.Throttle("bob")
	if alice == nil || bob == nil || l.Throttle("alice") != alice {
		t.Fatal("Throttle does not return one bucket per user")
	}
	// rate checks the rate and burst in effect: asked at a window's
	// start or end, Burst chooses them; 30 seconds fill the bucket at
	// that rate, its burst is then free, and its next `rate` bytes cost
	// a second.
	rate := func(b *limits.Bucket, want, wantBurst int) {
		t.Helper()
		if got := b.Burst(); got != wantBurst {
			t.Errorf("at %v: burst %d, want %d", clk.now().In(paris), got, wantBurst)
		}
		clk.advance(30 * time.Second)
		if d := b.Take(wantBurst); d != 0 {
			t.Fatalf("at %v: Take(burst %d) of a full bucket = %v", clk.now().In(paris), wantBurst, d)
		}
		if d := b.Take(want); d != time.Second {
			t.Errorf("at %v: the next %d bytes wait %v, want 1s: not paced at %d/s", clk.now().In(paris), want, d, want)
		}
		clk.advance(time.Hour) // pays the debt
	}
	rate(alice, 1000, 1000) // before the window: the default
	clk.advance(time.Date(2026, 3, 2, 9, 0, 0, 0, paris).Sub(clk.now()))
	rate(alice, 100, 100) // 09:00: the same bucket, the schedule's rate
	rate(bob, 1000, 1000) // bob: no weekday schedule
	clk.advance(time.Date(2026, 3, 2, 12, 30, 0, 0, paris).Sub(clk.now()))
	rate(alice, 100, 100) // the first schedule whose window holds decides, not the narrower one after it
	clk.advance(time.Date(2026, 3, 2, 18, 0, 0, 0, paris).Sub(clk.now()))
	rate(alice, 1000, 1000) // 18:00: the default again
	clk.advance(time.Date(2026, 3, 7, 10, 0, 0, 0, paris).Sub(clk.now()))
	rate(bob, 5000, 10000) // Saturday: "*"
	rate(alice, 5000, 10000)

	// A debt left when the rate changes is still paid, at the new rate.
	clk.advance(time.Date(2026, 3, 9, 8, 59, 59, 0, paris).Sub(clk.now()))
	alice.Take(alice.Burst() + 1000) // a debt of 1000: a second at 1000/s
	clk.advance(time.Second)         // 09:00: the debt is paid; 100/s from now
	if d := alice.Take(100); d != time.Second {
		t.Errorf("after the change to 100/s: Take(100) waits %v, want 1s (an empty bucket refilling at 100/s)", d)
	}
}

// TestThrottleSchedulesOnly checks a limiter with schedules and no
// default rate: a user no schedule selects is not paced; one a schedule
// selects has a bucket that limits within the window only, forgives its
// debt when the window ends and starts the next one full.
func TestThrottleSchedulesOnly(t *testing.T) {
	l, clk := newLimiter(t, limits.Config{Schedules: []limits.Schedule{
		{Who: who("carol"), Start: 22 * time.Hour, End: 6 * time.Hour, BytesPerSecond: 50, Burst: 50},
	}})
	if l.Throttle("dave") != nil {
		t.Error("a user no schedule selects has a bucket")
	}
	if l.Throttle("") != nil {
		t.Error("Throttle(\"\") is not nil")
	}
	clk.advance(21*time.Hour + 59*time.Minute) // 21:59 UTC
	carol := l.Throttle("carol")
	if carol == nil {
		t.Fatal("carol has no bucket")
	}
	if d := carol.Take(1 << 20); d != 0 || carol.Burst() < 1<<20 {
		t.Errorf("outside the window: Take(1 MiB) = %v, Burst() = %d; want no limit", d, carol.Burst())
	}
	clk.advance(time.Minute) // 22:00
	if d := carol.Take(100); d != time.Second {
		t.Errorf("22:00: Take(100) = %v, want 1s: a full bucket of 50 at 50/s", d)
	}
	carol.Take(1000) // a debt of 1050 bytes: 21 s
	clk.advance(8 * time.Hour)
	if d := carol.Take(1 << 20); d != 0 {
		t.Errorf("06:00: Take(1 MiB) = %v, want no limit and no debt", d)
	}
	clk.advance(16 * time.Hour) // 22:00 again
	if d := carol.Take(50); d != 0 {
		t.Errorf("the next window's first Take(50) = %v, want a full bucket", d)
	}
}
