package limits

import (
	"time"

	"github.com/rustle-proxy/rustle/internal/acl"
)

// Schedule sets the byte rate of the users it selects while its window
// holds, in place of Config.UserBytesPerSecond: a weekly window of some
// days and one span of the day, in a time zone.
type Schedule struct {
	// Who selects the users the schedule paces, by the name Throttle is
	// given; its zero value selects every user.
	Who acl.Selector
	// Days is the set of days the window starts on, a bit 1<<d for each
	// time.Weekday d; 0 means every day.
	Days uint8
	// Start and End bound the window within a day, times after midnight
	// on the clock of Loc: it holds from Start to End when Start < End
	// (End at most 24h), and from Start to End on the next day
	// otherwise (a window across midnight; Start == End is 24 hours
	// from Start). The zero values are the whole day.
	Start, End time.Duration
	// Loc is the zone of Days, Start and End; nil means UTC.
	Loc *time.Location
	// BytesPerSecond is the selected users' rate while the window holds;
	// 0 or less means not limited then.
	BytesPerSecond int64
	// Burst is the size of their bucket while the window holds (the
	// configuration defaults it).
	Burst int64
}

// Holds reports whether t falls within s's window.
func (s *Schedule) Holds(t time.Time) bool {
	loc := s.Loc
	if loc == nil {
		loc = time.UTC
	}
	lt := t.In(loc)
	h, m, sec := lt.Clock()
	tod := time.Duration(h)*time.Hour + time.Duration(m)*time.Minute + time.Duration(sec)*time.Second +
		time.Duration(lt.Nanosecond())
	day := lt.Weekday()
	if s.Start < s.End {
		return s.on(day) && s.Start <= tod && tod < s.End
	}
	return s.on(day) && tod >= s.Start || s.on((day+6)%7) && tod < s.End
}

// on reports whether the window starts on day d.
func (s *Schedule) on(d time.Weekday) bool { return s.Days == 0 || s.Days&(1<<d) != 0 }

// plan is how fast one user's bytes may go at a given time: the
// schedules that select the user, in order, the first whose window holds
// deciding, else the default.
type plan struct {
	schedules []*Schedule
	rate      float64 // the default, Config.UserBytesPerSecond; 0 = not limited
	burst     float64
}

// at returns the rate (0 = not limited) and burst in effect at t.
func (p *plan) at(t time.Time) (rate, burst float64) {
	for _, s := range p.schedules {
		if s.Holds(t) {
			if s.BytesPerSecond <= 0 {
				return 0, 0
			}
			return float64(s.BytesPerSecond), float64(s.Burst)
		}
	}
	return p.rate, p.burst
}

// planFor returns the plan of user name, nil when no schedule selects
// it (its rate is UserBytesPerSecond at all times).
func (l *Limiter) planFor(name string) *plan {
	var p *plan
	for i := range l.cfg.Schedules {
		s := &l.cfg.Schedules[i]
		if !s.Who.Match(name, nil) {
			continue
		}
		if p == nil {
			p = &plan{rate: float64(max(l.cfg.UserBytesPerSecond, 0)), burst: float64(l.cfg.UserBytesBurst)}
		}
		p.schedules = append(p.schedules, s)
	}
	return p
}
