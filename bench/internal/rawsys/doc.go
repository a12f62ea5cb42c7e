// Package rawsys makes the benchmark tools' TCP reads and writes raw,
// non-blocking system calls on Linux, so that the Go runtime's monitor
// does not take the calling goroutine's processor during them. The load
// tool and the origin share one core in the campaign: what they spend
// there limits how fast a proxy can be measured.
package rawsys
