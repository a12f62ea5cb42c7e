package gate

// SetAfterEngineAdd makes f run between the engine taking a tunnel and
// the tunnel's registration for revocation, until the returned function
// undoes it.
func SetAfterEngineAdd(f func()) (undo func()) {
	testHookAfterAdd = f
	return func() { testHookAfterAdd = nil }
}
