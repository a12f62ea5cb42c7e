//go:build race

package httpproxy_test

// raceBuild is whether the race detector is on: it adds allocations of
// its own, which allocation counts then leave out.
const raceBuild = true
