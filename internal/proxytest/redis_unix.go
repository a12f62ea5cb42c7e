//go:build unix

package proxytest

import "syscall"

// Stop stops the server with SIGSTOP: it keeps its port and connections
// but answers nothing, as a hung server does, until Continue or the end
// of the test (t.Cleanup continues it). It does nothing when the server
// is not running.
func (r *Redis) Stop() {
	r.t.Helper()
	r.signal(syscall.SIGSTOP)
	r.t.Cleanup(r.Continue)
}

// Continue resumes a server Stop stopped.
func (r *Redis) Continue() { r.signal(syscall.SIGCONT) }

// signal sends sig to the running server.
func (r *Redis) signal(sig syscall.Signal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return
	}
	if err := r.cmd.Process.Signal(sig); err != nil {
		r.t.Errorf("signal redis-server: %v", err)
	}
}
