package quota

import (
	"fmt"
	"time"
)

// Period is the length of a quota's window.
type Period uint8

// The periods a rule counts over.
const (
	// Day starts every day at the rule's reset time.
	Day Period = iota
	// Hour starts every hour at the reset time's minute.
	Hour
	// Month starts on the first day of every month at the reset time.
	Month
)

// ParsePeriod returns the period "hour", "day" or "month" names.
func ParsePeriod(s string) (Period, error) {
	switch s {
	case "hour":
		return Hour, nil
	case "day", "":
		return Day, nil
	case "month":
		return Month, nil
	}
	return 0, fmt.Errorf("quota: unknown period %q", s)
}

// String returns the period's name.
func (p Period) String() string {
	switch p {
	case Hour:
		return "hour"
	case Month:
		return "month"
	}
	return "day"
}

// Window returns the window of the period that holds now: from start
// (included) to end (excluded), reset being the time after midnight the
// period starts at in loc (for Hour, only its minutes count). Days and
// months follow loc's calendar, daylight saving time included: a day
// across a change is 23 or 25 hours long, and a reset time that does not
// exist that day (skipped by the change) falls as time.Date puts it.
func (p Period) Window(now time.Time, reset time.Duration, loc *time.Location) (start, end time.Time) {
	t := now.In(loc)
	hh, mm := int(reset/time.Hour), int(reset%time.Hour/time.Minute)
	y, mo, d := t.Date()
	switch p {
	case Hour:
		start = time.Date(y, mo, d, t.Hour(), mm, 0, 0, loc)
		if start.After(now) {
			start = start.Add(-time.Hour)
		}
		return start, start.Add(time.Hour)
	case Month:
		start = time.Date(y, mo, 1, hh, mm, 0, 0, loc)
		if start.After(now) {
			start = time.Date(y, mo-1, 1, hh, mm, 0, 0, loc)
		}
		sy, sm, _ := start.Date()
		return start, time.Date(sy, sm+1, 1, hh, mm, 0, 0, loc)
	}
	start = time.Date(y, mo, d, hh, mm, 0, 0, loc)
	if start.After(now) {
		start = time.Date(y, mo, d-1, hh, mm, 0, 0, loc)
	}
	sy, sm, sd := start.Date()
	return start, time.Date(sy, sm, sd+1, hh, mm, 0, 0, loc)
}
