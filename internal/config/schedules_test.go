package config

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestSchedules checks that [[limits.schedules]] parse with their
// defaults (time_zone UTC, bytes_burst one second's worth) and build the
// limiter's schedules: days as sets of weekdays (ranges across the
// week's end included), hours as times of day (across midnight, "24:00",
// none for the whole day), the zone, and users and [acl.groups] members
// selected.
func TestSchedules(t *testing.T) {
	src := lines(
		`[acl.groups]`,
		`night = ["carol"]`,
		`[limits]`,
		`user_bytes_per_second = 1000000`,
		`[[limits.schedules]]`,
		`users = ["alice"]`,
		`days = ["mon-fri"]`,
		`hours = "09:00-18:00"`,
		`time_zone = "Europe/Paris"`,
		`bytes_per_second = 100000`,
		`[[limits.schedules]]`,
		`groups = ["night"]`,
		`days = ["fri-mon", "wed"]`,
		`hours = "22:00-06:00"`,
		`bytes_per_second = 500`,
		`bytes_burst = 2000`,
		`[[limits.schedules]]`,
		`users = ["dave"]`,
		`bytes_per_second = 9`,
		`[[limits.schedules]]`,
		`users = ["*"]`,
		`hours = "12:00-24:00"`,
		`bytes_per_second = 7`,
		`[[listen]]`,
		`address = "127.0.0.1:3128"`,
	)
	c, err := Parse([]byte(src), "s.toml")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	want := []Schedule{
		{Who: Who{Users: []string{"alice"}}, Days: []string{"mon-fri"}, Hours: "09:00-18:00", TimeZone: "Europe/Paris",
			BytesPerSecond: 100000, BytesBurst: 100000},
		{Who: Who{Groups: []string{"night"}}, Days: []string{"fri-mon", "wed"}, Hours: "22:00-06:00", TimeZone: "UTC",
			BytesPerSecond: 500, BytesBurst: 2000},
		{Who: Who{Users: []string{"dave"}}, TimeZone: "UTC", BytesPerSecond: 9, BytesBurst: 9},
		{Who: Who{Users: []string{"*"}}, Hours: "12:00-24:00", TimeZone: "UTC", BytesPerSecond: 7, BytesBurst: 7},
	}
	if diff := cmp.Diff(want, c.Limits.Schedules); diff != "" {
		t.Errorf("schedules (-want +got):\n%s", diff)
	}
	ss, err := c.ByteSchedules()
	if err != nil {
		t.Fatal(err)
	}
	bits := func(ds ...time.Weekday) (m uint8) {
		for _, d := range ds {
			m |= 1 << d
		}
		return m
	}
	type built struct {
		Days       uint8
		Start, End time.Duration
		Zone       string
		Rate, Burs int64
	}
	var got []built
	for _, s := range ss {
		got = append(got, built{s.Days, s.Start, s.End, s.Loc.String(), s.BytesPerSecond, s.Burst})
	}
	wantBuilt := []built{
		{bits(time.Monday, time.Tuesday, time.Wednesday, time.Thursday, time.Friday), 9 * time.Hour, 18 * time.Hour, "Europe/Paris", 100000, 100000},
		{bits(time.Friday, time.Saturday, time.Sunday, time.Monday, time.Wednesday), 22 * time.Hour, 6 * time.Hour, "UTC", 500, 2000},
		{0, 0, 24 * time.Hour, "UTC", 9, 9},
		{0, 12 * time.Hour, 24 * time.Hour, "UTC", 7, 7},
	}
	if diff := cmp.Diff(wantBuilt, got); diff != "" {
		t.Errorf("ByteSchedules (-want +got):\n%s", diff)
	}
	for _, tt := range []struct {
		i    int
		user string
		want bool
	}{
		{0, "alice", true}, {0, "bob", false}, {1, "carol", true}, {1, "alice", false}, {3, "anyone", true}, {3, "", false},
	} {
		if got := ss[tt.i].Who.Match(tt.user, nil); got != tt.want {
			t.Errorf("schedules[%d] selects %q: %v, want %v", tt.i, tt.user, got, tt.want)
		}
	}
}

// TestScheduleMessages checks that a bad schedule is refused naming the
// key, its line and what is wrong: a day, a range, a day twice, hours, a
// time zone, the rate and burst, no users, a group that is not in
// [acl.groups] (a provider's is not known to the limiter), and a window
// that overlaps an earlier one selecting all its users in the same zone
// (which would always win there), while windows apart, other users, an
// earlier narrower selection and another zone are no overlap.
func TestScheduleMessages(t *testing.T) {
	src := lines(
		`[acl.groups]`, // 1
		`team = ["alice", "bob"]`,
		`[limits]`,
		`[[limits.schedules]]`, // 4: schedules[0]
		`days = ["funday", "mon-xyz", "tue", "mon-wed"]`,
		`hours = "9-18"`,
		`time_zone = "Mars/Olympus"`,
		`bytes_per_second = 0`,
		`bytes_burst = -1`,
		`[[limits.schedules]]`, // 10: schedules[1]
		`users = ["a:b"]`,
		`groups = ["nobody"]`,
		`hours = "09:00-09:00"`,
		`bytes_per_second = 1`,
		`[[limits.schedules]]`, // 15: schedules[2]
		`users = ["alice"]`,
		`days = ["mon-fri"]`,
		`hours = "09:00-18:00"`,
		`bytes_per_second = 100`,
		`[[limits.schedules]]`, // 20: schedules[3], inside [2] for alice
		`users = ["alice"]`,
		`days = ["wed"]`,
		`hours = "12:00-13:00"`,
		`bytes_per_second = 10`,
		`[[limits.schedules]]`, // 25: schedules[4], the day before [2]'s: apart
		`users = ["alice"]`,
		`days = ["sun"]`,
		`hours = "18:00-09:00"`,
		`bytes_per_second = 10`,
		`[[limits.schedules]]`, // 30: schedules[5], a group [2] does not cover
		`groups = ["team"]`,
		`days = ["mon"]`,
		`bytes_per_second = 10`,
		`[[limits.schedules]]`, // 34: schedules[6], every user, after narrower ones
		`users = ["*"]`,
		`bytes_per_second = 1000`,
		`[[limits.schedules]]`, // 37: schedules[7], bob, shadowed by [6] everywhere
		`users = ["bob"]`,
		`days = ["sat"]`,
		`hours = "22:00-01:00"`,
		`bytes_per_second = 10`,
		`[[limits.schedules]]`, // 42: schedules[8], [2]'s users and hours in another zone
		`users = ["alice"]`,
		`days = ["mon-fri"]`,
		`hours = "09:00-18:00"`,
		`time_zone = "Asia/Tokyo"`,
		`bytes_per_second = 100`,
		`[[limits.schedules]]`, // 48: schedules[9], a member of team: [5] covers bob on Monday
		`users = ["bob"]`,
		`days = ["mon"]`,
		`hours = "08:00-09:30"`,
		`time_zone = "UTC"`,
		`bytes_per_second = 100`,
		`[[listen]]`,
		`address = "127.0.0.1:3128"`,
	)
	c, err := Parse([]byte(src), "s.toml")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`s.toml:4: limits.schedules[0]: names no users and no groups`,
		`s.toml:5: limits.schedules[0].days[0]: "funday" is not a day (mon, tue, wed, thu, fri, sat, sun) or a range of them such as "mon-fri"`,
		`s.toml:5: limits.schedules[0].days[1]: "mon-xyz" is not a day (mon, tue, wed, thu, fri, sat, sun) or a range of them such as "mon-fri"`,
		`s.toml:5: limits.schedules[0].days[3]: "mon-wed" names a day named before it`,
		`s.toml:6: limits.schedules[0].hours: "9-18" is not a span of the day "HH:MM-HH:MM" such as "09:00-18:00"`,
		`s.toml:7: limits.schedules[0].time_zone: unknown time zone "Mars/Olympus"`,
		`s.toml:8: limits.schedules[0].bytes_per_second: 0 is less than 1`,
		`s.toml:9: limits.schedules[0].bytes_burst: -1 is less than 1`,
		`s.toml:11: limits.schedules[1].users[0]: user name "a:b" has ':' or a control character`,
		`s.toml:12: limits.schedules[1].groups[0]: group "nobody" is not defined in [acl.groups]`,
		`s.toml:13: limits.schedules[1].hours: "09:00-09:00" starts and ends at the same time: write "00:00-24:00" (or leave hours out) for the whole day`,
		`s.toml:20: limits.schedules[3]: its window overlaps that of limits.schedules[2], which selects all its users and, coming first, would always win there: make the windows apart, or put this one first`,
		`s.toml:37: limits.schedules[7]: its window overlaps that of limits.schedules[6], which selects all its users and, coming first, would always win there: make the windows apart, or put this one first`,
		`s.toml:48: limits.schedules[9]: its window overlaps that of limits.schedules[5], which selects all its users and, coming first, would always win there: make the windows apart, or put this one first`,
	}
	if diff := cmp.Diff(want, errorStrings(t, c.Validate())); diff != "" {
		t.Errorf("Validate messages (-want +got):\n%s", diff)
	}
}

// TestLimitsEqual checks what a reload compares to keep the limiter: the
// [limits] table, schedules included, and the members of the groups the
// schedules name, not those of other groups.
func TestLimitsEqual(t *testing.T) {
	base := func() *Config {
		c := &Config{}
		c.ACL.Groups = map[string][]string{"team": {"alice"}, "other": {"bob"}}
		c.Limits.UserBytesPerSecond = 1000
		c.Limits.Schedules = []Schedule{{Who: Who{Groups: []string{"team"}}, BytesPerSecond: 10}}
		c.SetDefaults()
		return c
	}
	for _, tt := range []struct {
		name   string
		change func(c *Config)
		want   bool
	}{
		{"nothing", func(*Config) {}, true},
		{"another group's members", func(c *Config) { c.ACL.Groups["other"] = []string{"bob", "carol"} }, true},
		{"a named group's members", func(c *Config) { c.ACL.Groups["team"] = []string{"alice", "carol"} }, false},
		{"a schedule's rate", func(c *Config) { c.Limits.Schedules[0].BytesPerSecond = 20 }, false},
		{"a schedule's hours", func(c *Config) { c.Limits.Schedules[0].Hours = "09:00-10:00" }, false},
		{"the default rate", func(c *Config) { c.Limits.UserBytesPerSecond = 2000 }, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			next := base()
			tt.change(next)
			if got := next.LimitsEqual(base()); got != tt.want {
				t.Errorf("LimitsEqual = %v, want %v", got, tt.want)
			}
		})
	}
}
