//go:build !linux

package gate

import (
	"errors"
	"sync/atomic"
)

// FlowPoller waits for the target's datagrams of many CONNECT-UDP flows
// in one goroutine where the system has epoll (Linux); elsewhere there is
// none, and each flow has a goroutine of its own.
type FlowPoller struct{}

// NewFlowPoller reports that this system has no FlowPoller to give.
func NewFlowPoller() (*FlowPoller, error) {
	return nil, errors.ErrUnsupported
}

// Close does nothing: there is no poller.
func (p *FlowPoller) Close() error { return nil }

func (p *FlowPoller) add(*FlowRelay, int) error { return errors.ErrUnsupported }

func (p *FlowPoller) remove(*FlowRelay) {}

// rawSocket is a flow's target socket as a FlowPoller holds it; there is
// none here: a flow keeps its net.UDPConn.
type rawSocket struct{ fd int32 }

func (s *rawSocket) close() {}

func (s *rawSocket) write([]byte, *atomic.Bool) (int, error) { return 0, errors.ErrUnsupported }
