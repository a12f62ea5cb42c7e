//go:build !linux

package gate

import "errors"

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
