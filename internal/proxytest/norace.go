//go:build !race

package proxytest

// Race is whether the race detector is on (see race.go).
const Race = false
