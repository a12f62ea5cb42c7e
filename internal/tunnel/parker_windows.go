package tunnel

// ready is the RawConn.Read callback of Wait. Windows sockets give no
// cheap non-blocking peek, but RawConn.Read waits for readability itself
// (a zero-byte overlapped read, which honours the read deadline) when its
// callback answers false: so the first call answers false and the call
// after the wait answers true.
func (p *Parker) ready(uintptr) bool {
	if !p.asked {
		p.asked = true
		return false
	}
	return true
}
