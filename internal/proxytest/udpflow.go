package proxytest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/rustle-proxy/rustle/internal/quota"
)

// FlowQuotaBytes is the byte quota QuotaTracker gives every user: 200
// KiB, as in issue 27's report of flows that carried 12 to 15 times it.
const FlowQuotaBytes = 200 << 10

// FlowQuotaSlack is how far past its quota a flow of datagrams of at
// most size payload bytes may go (docs/operations.md, Quotas): less than
// a batch of the meter's, and a datagram in flight each way.
func FlowQuotaSlack(size int) int64 { return quota.DatagramBatch + 2*int64(size) }

// QuotaTracker returns a quota tracker with one daily rule of
// FlowQuotaBytes for every user.
func QuotaTracker() *quota.Tracker {
	return quota.New(quota.Config{Rules: []quota.Rule{{Name: "daily", Users: []string{"*"}, Period: quota.Day, Bytes: FlowQuotaBytes}}})
}

// EchoFlow carries datagrams of size payload bytes through a UDP flow to
// an echo origin in lock-step: it sends one with send and waits for its
// echo with recv (which must give up on its own, with an error, when the
// flow ends or nothing comes), until either fails or limit bytes went
// each way. It returns the payload bytes the client sent and received,
// and the error that ended the flow (nil: limit reached, the flow still
// open).
func EchoFlow(t testing.TB, send func([]byte) error, recv func() ([]byte, error), size int, limit int64) (moved int64, err error) {
	t.Helper()
	for i := 0; int64(i)*int64(size) < limit; i++ {
		p := bytes.Repeat([]byte{byte('a' + i%26)}, size)
		if err := send(p); err != nil {
			return moved, fmt.Errorf("send datagram %d: %w", i, err)
		}
		moved += int64(size)
		got, err := recv()
		if err != nil {
			return moved, fmt.Errorf("echo of datagram %d: %w", i, err)
		}
		moved += int64(len(got))
		if !bytes.Equal(got, p) {
			t.Fatalf("echo of datagram %d: %d bytes %.8q, want %d bytes %.8q", i, len(got), got, size, p)
		}
	}
	return moved, nil
}

// CheckFlowQuota checks the end of a flow of user's, with datagrams of
// size payload bytes, that EchoFlow carried under QuotaTracker's quota
// q until err ended it: it did end, the flow's record in out (the JSON
// access log, waited for) says the reason quota, its bytes are within
// FlowQuotaSlack(size) past FlowQuotaBytes (and at least the quota less
// a datagram: it was ended for the quota), and the quota counted
// exactly them.
func CheckFlowQuota(t testing.TB, out fmt.Stringer, q *quota.Tracker, user string, size int, err error) {
	t.Helper()
	if err == nil {
		t.Fatalf("the flow carried %d bytes each way under a byte quota of %d and is still open", 20*FlowQuotaBytes, FlowQuotaBytes)
	}
	WaitFor(t, "the flow's record", func() bool { return strings.Contains(out.String(), `"reason":"quota"`) })
	log := out.String()
	var rec struct {
		User      string `json:"user"`
		Reason    string `json:"reason"`
		BytesUp   int64  `json:"bytes_up"`
		BytesDown int64  `json:"bytes_down"`
	}
	found := false
	for _, line := range strings.Split(log, "\n") {
		if line == "" {
			continue
		}
		rec.Reason = ""
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Reason == "quota" && rec.User == user {
			found = true
			break
		}
	}
	if !found {
		t.Fatalf("no record of %s's flow with the reason quota (the flow ended with %v):\n%s", user, err, log)
	}
	moved := rec.BytesUp + rec.BytesDown
	t.Logf("the flow moved %d bytes under a quota of %d (%.3f times it), then ended: %v", moved, FlowQuotaBytes, float64(moved)/FlowQuotaBytes, err)
	if slack := FlowQuotaSlack(size); moved < FlowQuotaBytes-int64(size) || moved > FlowQuotaBytes+slack {
		t.Errorf("the flow moved %d bytes (%.2f times the quota); want within %d past the quota of %d", moved, float64(moved)/FlowQuotaBytes, slack, FlowQuotaBytes)
	}
	if st := q.Status(user); len(st) != 1 || st[0].BytesUsed != moved {
		t.Errorf("quota status %+v, want the %d bytes of the record used", st, moved)
	}
}
