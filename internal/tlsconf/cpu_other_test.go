//go:build !unix

package tlsconf

import "time"

// cpuTime reports false: the tests measure CPU time on Unix systems only.
func cpuTime() (time.Duration, bool) { return 0, false }
