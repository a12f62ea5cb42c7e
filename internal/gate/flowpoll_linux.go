package gate

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// FlowPoller waits for the target's datagrams of many CONNECT-UDP flows
// in one goroutine, so that an idle flow has no goroutine of its own
// parked on its socket: an epoll set of the flows' sockets, itself parked
// in Go's netpoller, and one set of read buffers for all of them. The
// goroutine reads each ready socket's datagrams (several at a time) and
// sends them to the client itself,
// so a flow's client side must not block for long in SendPayload: a
// front-end shares a poller among flows that share what SendPayload may
// wait on (the flows of one QUIC connection, whose DATAGRAM frames wait
// in one send queue). A paced user's flow keeps a goroutine of its own
// (its datagrams wait on the user's bucket). Close it once none of its
// flows is left.
type FlowPoller struct {
	epfd int
	file *os.File        // epfd, parked in Go's netpoller
	raw  syscall.RawConn // file's

	mu     sync.Mutex
	flows  map[int32]polled // by socket descriptor; guarded by mu
	gen    int32            // the last registration's; guarded by mu
	buf    []byte           // the read buffers, pollerBatch of them; guarded by mu
	closed bool             // guarded by mu

	events []unix.EpollEvent       // serve's
	hdrs   [pollerBatch]mmsghdr    // recv's, guarded by mu
	iovs   [pollerBatch]unix.Iovec // recv's, guarded by mu
}

// polled is a flow of a FlowPoller: its relay, whose rawSocket a read
// holds open against a concurrent close, and the generation its
// registration carries in the epoll event, which tells a stale event of
// a closed socket whose descriptor was reused apart.
type polled struct {
	r   *FlowRelay
	gen int32
	max int32 // the largest datagram the flow's client side carries
}

// pollerEvents is how many ready sockets a FlowPoller takes at once.
const pollerEvents = 64

// NewFlowPoller starts a FlowPoller; an error says this system has none
// to give (flows then each have a goroutine of their own).
func NewFlowPoller() (*FlowPoller, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("gate: flow poller: epoll_create1: %w", err)
	}
	// An epoll descriptor is itself pollable: readable while it has
	// events. Non-blocking, os.NewFile registers it with Go's netpoller.
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("gate: flow poller: set non-blocking: %w", err)
	}
	p := &FlowPoller{epfd: epfd, file: os.NewFile(uintptr(epfd), "flow-epoll"), flows: make(map[int32]polled),
		events: make([]unix.EpollEvent, pollerEvents)}
	rc, err := p.file.SyscallConn()
	if err != nil {
		p.file.Close()
		return nil, fmt.Errorf("gate: flow poller: %w", err)
	}
	p.raw = rc
	go p.loop()
	return p, nil
}

// Close stops the poller's goroutine. Flows still added get no more of
// their target's datagrams: close it after the last flow's Wait.
func (p *FlowPoller) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	return p.file.Close() // epfd with it; the loop's wait returns
}

// add registers r's socket, which it takes from r.upc: r keeps its
// descriptor alone (a duplicate; see rawSocket), upc is closed and r.upc
// set to nil. An error leaves r and upc as they were, to a goroutine of
// r's own.
func (p *FlowPoller) add(r *FlowRelay, max int) error {
	rc, err := r.upc.SyscallConn()
	if err != nil {
		return err
	}
	fd := -1
	var cerr error
	if err := rc.Control(func(s uintptr) { fd, cerr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return err
	}
	if cerr != nil {
		return fmt.Errorf("gate: flow poller: dup: %w", cerr)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		unix.Close(fd)
		return errors.New("gate: flow poller closed")
	}
	if len(p.buf) < pollerBatch*(max+1) {
		p.buf = make([]byte, pollerBatch*(max+1)) // one more byte tells a longer datagram apart
	}
	p.gen++
	e := polled{r: r, gen: p.gen, max: int32(max)}
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLET, Fd: int32(fd), Pad: e.gen}
	if err := unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		unix.Close(fd)
		return err
	}
	// upc's descriptor leaves Go's netpoller as upc closes; its duplicate,
	// of the same socket, stays in the poller's set.
	r.upc.Close()
	r.upc = nil
	r.sock.fd = int32(fd)
	p.flows[int32(fd)] = e
	return nil
}

// remove unregisters r: once it returns the poller no longer touches r.
func (p *FlowPoller) remove(r *FlowRelay) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.flows[r.sock.fd]; ok && e.r == r {
		p.drop(r.sock.fd)
	}
}

// drop unregisters the flow of descriptor fd; p.mu is held. The socket
// may be closed already (its descriptor left the epoll set with it).
func (p *FlowPoller) drop(fd int32) {
	delete(p.flows, fd)
	if !p.closed {
		unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, int(fd), nil)
	}
}

// loop waits for ready sockets and drains each of them, relaying their
// datagrams, until Close. It stays in one RawConn.Read, whose callback
// serve does the work: a readiness of the epoll descriptor that the
// netpoller saw while serve was busy is kept for the next wait only
// within one Read (each Read starts by forgetting it).
func (p *FlowPoller) loop() {
	p.raw.Read(p.serve) // returns once closed
}

// serve is the RawConn.Read callback of loop: it takes the events ready
// without waiting and relays them, and asks to park once there are no
// more. Every socket reported is drained (the set is edge-triggered), so
// one that became ready since raised the epoll descriptor's readiness,
// which the netpoller keeps for the next wait: serve need not ask
// epoll_wait again before parking unless the events did not all fit.
func (p *FlowPoller) serve(fd uintptr) bool {
	for {
		n, err := unix.EpollWait(int(fd), p.events, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return true // only on a closed or broken descriptor: the loop ends
		}
		if n == 0 {
			return false
		}
		p.mu.Lock()
		for i := range n {
			ev := &p.events[i]
			e, ok := p.flows[ev.Fd]
			if !ok || e.gen != ev.Pad {
				continue // a stale event of a flow removed since
			}
			p.drain(ev.Fd, e)
		}
		p.mu.Unlock()
		if n < len(p.events) {
			return false
		}
	}
}

// drain reads the datagrams of the flow of descriptor fd until its
// socket has none left, relaying each to the client; p.mu is held. It
// reads them in batches (recvmmsg): a batch that is not full says the
// socket is drained, without a read that fails.
func (p *FlowPoller) drain(fd int32, e polled) {
	r := e.r
	max := int(e.max)
	for {
		var n int
		var err error
		if sfd, ok := r.sock.hold(); ok {
			n, err = p.recv(uintptr(sfd), max+1)
			r.sock.release()
		} else {
			err = net.ErrClosed
		}
		switch {
		case err == nil:
		case err == unix.EAGAIN:
			return
		case errors.Is(err, syscall.ECONNREFUSED):
			continue // an ICMP error of an earlier datagram: UDP is unreliable
		case errors.Is(err, net.ErrClosed):
			p.drop(fd) // ended: its socket is closing
			return
		default:
			r.End(fmt.Errorf("gate: flow: read from %s: %w", r.dst, err))
			p.drop(fd)
			return
		}
		for i := range n {
			got := int(p.hdrs[i].n)
			b := p.buf[i*(max+1):][:min(got, max)]
			if !r.down1(b, got, max) {
				p.drop(fd)
				return
			}
		}
		if n < len(p.hdrs) {
			return
		}
	}
}

// recv reads up to len(p.hdrs) datagrams of socket fd, each into size
// bytes of p.buf, without waiting: recvmmsg(2).
func (p *FlowPoller) recv(fd uintptr, size int) (int, error) {
	for i := range p.hdrs {
		p.iovs[i].Base = &p.buf[i*size]
		p.iovs[i].SetLen(size)
		h := &p.hdrs[i]
		h.hdr = unix.Msghdr{Iov: &p.iovs[i]}
		h.hdr.SetIovlen(1)
		h.n = 0
	}
	for {
		n, _, e := unix.RawSyscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&p.hdrs[0])), uintptr(len(p.hdrs)), unix.MSG_DONTWAIT, 0, 0)
		switch e {
		case 0:
			return int(n), nil
		case unix.EINTR:
			continue
		}
		return 0, e
	}
}

// mmsghdr is struct mmsghdr of recvmmsg(2).
type mmsghdr struct {
	hdr unix.Msghdr
	n   uint32
}

// pollerBatch is how many datagrams a FlowPoller reads from a socket at
// once: two, so that a batch of one tells a drained socket.
const pollerBatch = 2

// rawSocket is a flow's target socket as a FlowPoller holds it: its
// descriptor alone, without the net.UDPConn (and its netFD, addresses
// and RawConn) that made it, a few hundred bytes per idle flow. A use
// holds it open against a concurrent close: the descriptor is closed
// once the last use has ended, so that a use never reaches another
// socket given the same descriptor since.
type rawSocket struct {
	fd    int32
	state atomic.Int32 // the uses in progress, and sockClosed once closed
}

// sockClosed is the bit of rawSocket.state that says the socket is
// closed (or closing, once its uses end).
const sockClosed = 1 << 30

// hold begins a use of the descriptor, unless the socket is closed.
func (s *rawSocket) hold() (int32, bool) {
	for {
		v := s.state.Load()
		if v&sockClosed != 0 {
			return -1, false
		}
		if s.state.CompareAndSwap(v, v+1) {
			return s.fd, true
		}
	}
}

// release ends a use, closing the descriptor if it is the last use of a
// closed socket.
func (s *rawSocket) release() {
	if s.state.Add(-1) == sockClosed {
		unix.Close(int(s.fd))
	}
}

// close closes the socket: at once, or when its last use ends. It may be
// called more than once.
func (s *rawSocket) close() {
	if s.fd < 0 {
		return
	}
	if old := s.state.Or(sockClosed); old == 0 {
		unix.Close(int(s.fd))
	}
}

// write sends p as one datagram. A full send buffer is waited for, as
// a net.UDPConn's Write waits, until it drains or ended is set.
func (s *rawSocket) write(p []byte, ended *atomic.Bool) (int, error) {
	fd, ok := s.hold()
	if !ok {
		return 0, net.ErrClosed
	}
	defer s.release()
	for {
		n, err := unix.Write(int(fd), p)
		switch err {
		case nil:
			return n, nil
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			if ended.Load() {
				return 0, net.ErrClosed
			}
			// Waits in slices, the flow's end checked between them: a
			// closing descriptor does not wake poll(2).
			pfd := []unix.PollFd{{Fd: fd, Events: unix.POLLOUT}}
			unix.Poll(pfd, 100)
			continue
		}
		return 0, err
	}
}
