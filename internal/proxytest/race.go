//go:build race

package proxytest

// Race is whether the race detector is on: it makes stacks and heaps
// larger and adds allocations of its own, which memory and allocation
// bounds then allow for.
const Race = true
