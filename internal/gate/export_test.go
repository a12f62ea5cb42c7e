package gate

import "time"

// SetAfterEngineAdd makes f run between the engine taking a tunnel and
// the tunnel's registration for revocation, until the returned function
// undoes it.
func SetAfterEngineAdd(f func()) (undo func()) {
	testHookAfterAdd = f
	return func() { testHookAfterAdd = nil }
}

// ResetLoopWarn forgets when a loop was last warned of, so that the next
// refused loop is logged.
func ResetLoopWarn() {
	loopWarn.mu.Lock()
	loopWarn.last, loopWarn.n = time.Time{}, 0
	loopWarn.mu.Unlock()
}
