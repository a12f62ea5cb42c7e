package gate

import "time"

// Deadline returns the deadline d after from, or the zero Time (no
// deadline) when d is 0 or less: every front-end's timeout settings mean
// "no limit" at 0, and arm their deadlines through it.
func Deadline(from time.Time, d time.Duration) time.Time {
	if d <= 0 {
		return time.Time{}
	}
	return from.Add(d)
}
