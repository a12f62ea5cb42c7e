//go:build !race

package httpproxy_test

// raceBuild is whether the race detector is on (see race_test.go).
const raceBuild = false
