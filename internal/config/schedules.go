package config

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	// The time zones, built in: a FROM scratch image has no
	// /usr/share/zoneinfo, and a schedule's or a quota's time_zone must
	// load there as it does on a host.
	_ "time/tzdata"

	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/limits"
)

// Schedule is one [[limits.schedules]] table: the byte rate of some
// users on some days between two times of day, in place of
// user_bytes_per_second while its window holds (see limits.Schedule).
type Schedule struct {
	// Who is the users the schedule paces: users (["*"] is every
	// authenticated user) and groups of [acl.groups], matched against the
	// account a request counts as (alice for alice-session-42). One of
	// users and groups at least is required.
	Who
	// Days are the days the window starts on: "mon", "tue", "wed",
	// "thu", "fri", "sat", "sun", or ranges of them such as "mon-fri"
	// (or "fri-mon", across the week's end); empty means every day.
	Days []string `toml:"days"`
	// Hours is the window within a day, "HH:MM-HH:MM" in TimeZone, from
	// the first time to the second ("24:00" is the day's end); a second
	// time before the first runs across midnight into the next day
	// ("22:00-06:00"). "" means the whole day.
	Hours string `toml:"hours"`
	// TimeZone is the IANA time zone of Days and Hours ("Europe/Paris");
	// "" means "UTC".
	TimeZone string `toml:"time_zone"`
	// BytesPerSecond is the users' rate, both directions together, while
	// the window holds; required, at least 1.
	BytesPerSecond int64 `toml:"bytes_per_second"`
	// BytesBurst is the size of their bucket while the window holds; 0
	// means BytesPerSecond (one second's worth).
	BytesBurst int64 `toml:"bytes_burst"`
}

// dayNames are the days of a schedule, by time.Weekday.
var dayNames = [7]string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}

// ParseDays parses one entry of a schedule's days, a day ("mon") or a
// range of days ("mon-fri", "fri-mon" across the week's end), into the
// set it names: a bit 1<<d for each time.Weekday d.
func ParseDays(s string) (uint8, error) {
	day := func(name string) (int, bool) {
		i := slices.Index(dayNames[:], name)
		return i, i >= 0
	}
	from, to, isRange := strings.Cut(s, "-")
	if !isRange {
		to = from
	}
	a, ok1 := day(from)
	b, ok2 := day(to)
	if !ok1 || !ok2 {
		return 0, fmt.Errorf("%q is not a day (mon, tue, wed, thu, fri, sat, sun) or a range of them such as \"mon-fri\"", s)
	}
	var set uint8
	for d := a; ; d = (d + 1) % 7 {
		set |= 1 << d
		if d == b {
			return set, nil
		}
	}
}

// ParseHours parses a schedule's hours, "HH:MM-HH:MM" (the second time
// may be "24:00"), into the times after midnight the window starts and
// ends at; "" is the whole day, 0 to 24h. An end before the start is on
// the next day; an end equal to the start is refused.
func ParseHours(s string) (start, end time.Duration, err error) {
	if s == "" {
		return 0, 24 * time.Hour, nil
	}
	bad := fmt.Errorf("%q is not a span of the day \"HH:MM-HH:MM\" such as \"09:00-18:00\"", s)
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		return 0, 0, bad
	}
	if start, err = ParseReset(a); err != nil {
		return 0, 0, bad
	}
	if b == "24:00" {
		end = 24 * time.Hour
	} else if end, err = ParseReset(b); err != nil {
		return 0, 0, bad
	}
	if start == end {
		return 0, 0, fmt.Errorf("%q starts and ends at the same time: write \"00:00-24:00\" (or leave hours out) for the whole day", s)
	}
	return start, end, nil
}

// setScheduleDefaults fills the [[limits.schedules]] defaults.
func (c *Config) setScheduleDefaults() {
	for i := range c.Limits.Schedules {
		s := &c.Limits.Schedules[i]
		setString(&s.TimeZone, defaultQuotaZone)
		if s.BytesBurst == 0 {
			s.BytesBurst = s.BytesPerSecond
		}
	}
}

// week is a set of the minutes of a week, Sunday 00:00 first, for
// comparing schedules' windows.
type week [(7*24*60 + 63) / 64]uint64

// window returns the minutes of the week the window of days (a set of
// time.Weekday bits) from start to end holds.
func window(days uint8, start, end time.Duration) *week {
	var w week
	n := int(end-start) / int(time.Minute)
	if end <= start {
		n += 24 * 60
	}
	for d := range 7 {
		if days&(1<<d) == 0 {
			continue
		}
		first := d*24*60 + int(start/time.Minute)
		for m := range n {
			i := (first + m) % (7 * 24 * 60)
			w[i/64] |= 1 << (i % 64)
		}
	}
	return &w
}

// overlaps reports whether w and o share a minute.
func (w *week) overlaps(o *week) bool {
	for i := range w {
		if w[i]&o[i] != 0 {
			return true
		}
	}
	return false
}

// selectsAll reports whether who selects every user other does, with
// the members of groups: other could then never apply where who's
// window holds, as who comes first.
func selectsAll(who, other Who, groups map[string][]string) bool {
	if slices.Contains(who.Users, "*") {
		return true
	}
	s := acl.NewSelector(acl.Who(who), groups, nil)
	for _, u := range other.Users {
		if u == "*" || !s.Match(u, nil) {
			return false
		}
	}
	for _, g := range other.Groups {
		if slices.Contains(who.Groups, g) {
			continue
		}
		for _, u := range groups[g] {
			if !s.Match(u, nil) {
				return false
			}
		}
	}
	return true
}

// validateSchedules checks [[limits.schedules]]: each one's users,
// groups, days, hours, time zone and rate, and that no schedule's window
// overlaps that of an earlier one in the same time zone selecting all
// its users, which would always win there.
func (c *Config) validateSchedules(v *validator) {
	type parsed struct {
		ok   bool
		zone string
		week *week
	}
	done := make([]parsed, len(c.Limits.Schedules))
	for i, s := range c.Limits.Schedules {
		key := fmt.Sprintf("limits.schedules[%d]", i)
		v.check(len(s.Users)+len(s.Groups) > 0, key, "names no users and no groups")
		c.validateWho(v, key, s.Who, false)
		var days uint8
		ok := true
		for j, d := range s.Days {
			set, err := ParseDays(d)
			switch {
			case err != nil:
				v.add(fmt.Sprintf("%s.days[%d]", key, j), err)
				ok = false
			case days&set != 0:
				v.add(fmt.Sprintf("%s.days[%d]", key, j), fmt.Errorf("%q names a day named before it", d))
				ok = false
			}
			days |= set
		}
		if len(s.Days) == 0 {
			days = 1<<7 - 1
		}
		start, end, err := ParseHours(s.Hours)
		if err != nil {
			v.add(key+".hours", err)
			ok = false
		}
		if _, err := time.LoadLocation(s.TimeZone); err != nil {
			v.add(key+".time_zone", fmt.Errorf("unknown time zone %q", s.TimeZone))
			ok = false
		}
		v.check(s.BytesPerSecond >= 1, key+".bytes_per_second", "%d is less than 1", s.BytesPerSecond)
		v.check(s.BytesBurst >= 1, key+".bytes_burst", "%d is less than 1", s.BytesBurst)
		if !ok {
			continue
		}
		done[i] = parsed{ok: true, zone: s.TimeZone, week: window(days, start, end)}
		for j := range i {
			p := done[j]
			if p.ok && p.zone == s.TimeZone && p.week.overlaps(done[i].week) &&
				selectsAll(c.Limits.Schedules[j].Who, s.Who, c.ACL.Groups) {
				v.add(key, fmt.Errorf("its window overlaps that of limits.schedules[%d], which selects all its users "+
					"and, coming first, would always win there: make the windows apart, or put this one first", j))
				break
			}
		}
	}
}

// ByteSchedules returns [[limits.schedules]] for limits.Config, their
// users and groups compiled with [acl.groups]. The configuration is
// validated.
func (c *Config) ByteSchedules() ([]limits.Schedule, error) {
	var out []limits.Schedule
	for i, s := range c.Limits.Schedules {
		key := fmt.Sprintf("limits.schedules[%d]", i)
		var days uint8
		for j, d := range s.Days {
			set, err := ParseDays(d)
			if err != nil {
				return nil, c.KeyError(fmt.Sprintf("%s.days[%d]", key, j), err)
			}
			days |= set
		}
		start, end, err := ParseHours(s.Hours)
		if err != nil {
			return nil, c.KeyError(key+".hours", err)
		}
		loc, err := time.LoadLocation(s.TimeZone)
		if err != nil {
			return nil, c.KeyError(key+".time_zone", err)
		}
		out = append(out, limits.Schedule{Who: c.Selector(s.Who, false), Days: days, Start: start, End: end, Loc: loc,
			BytesPerSecond: s.BytesPerSecond, Burst: s.BytesBurst})
	}
	return out, nil
}

// LimitsEqual reports whether c's [limits] are prev's, the members of
// the groups its schedules name included: a reload that keeps them
// keeps the limiter, and what it counts.
func (c *Config) LimitsEqual(prev *Config) bool {
	if !reflect.DeepEqual(c.Limits, prev.Limits) {
		return false
	}
	for _, s := range c.Limits.Schedules {
		for _, g := range s.Groups {
			if !slices.Equal(c.ACL.Groups[g], prev.ACL.Groups[g]) {
				return false
			}
		}
	}
	return true
}
