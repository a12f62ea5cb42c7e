//go:build !linux

package main

import "time"

// sleepPacer waits with time.Sleep, which on some systems wakes up to a
// millisecond late for short waits (see pacer_linux.go): the fixed-rate
// figures of the campaign are measured on Linux.
type sleepPacer struct{}

// newPacer returns a worker's pacing timer.
func newPacer() (waiter, error) { return sleepPacer{}, nil }

func (sleepPacer) waitUntil(t time.Time) error {
	time.Sleep(time.Until(t))
	return nil
}

func (sleepPacer) close() {}
