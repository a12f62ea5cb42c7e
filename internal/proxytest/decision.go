package proxytest

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
)

// DecisionPath is the data API path a [DecisionService] answers, as OPA
// answers a policy of package rustle.authz.
const DecisionPath = "/v1/data/rustle/authz"

// DecisionAnswer is what a [DecisionService] answers one document with.
type DecisionAnswer struct {
	// Status is the answer's status; 0 = 200.
	Status int
	// Body is the answer's body, sent as it is (garbage too).
	Body string
	// Hold, when not nil, holds the answer until it is closed or the
	// client goes away: a slow or hung service.
	Hold <-chan struct{}
}

// DecisionService is an HTTP server on a loopback port that answers
// POST DecisionPath with {"input": ...} in the shape of Open Policy
// Agent's data API, with what its function returns for each input:
// the service a test of the decision service's failures needs (slow,
// hung, garbage, a status), which a real OPA does not show. A test of
// what a real policy engine answers uses [StartOPA].
type DecisionService struct {
	// URL is the data API's URL: http://127.0.0.1:PORT + DecisionPath.
	URL string

	ln     net.Listener
	srv    *http.Server
	calls  atomic.Int64
	mu     sync.Mutex
	inputs []map[string]any // guarded by mu
	auths  []string         // guarded by mu
}

// StartDecisionService starts a decision service answering with answer,
// called with each document's input (nil for a body that is none). It
// is stopped at t.Cleanup, or sooner by Close.
func StartDecisionService(t testing.TB, answer func(input map[string]any) DecisionAnswer) *DecisionService {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxytest: decision service: %v", err)
	}
	d := &DecisionService{URL: "http://" + ln.Addr().String() + DecisionPath, ln: ln}
	d.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != DecisionPath {
			http.NotFound(w, r)
			return
		}
		d.calls.Add(1)
		var doc struct {
			Input map[string]any `json:"input"`
		}
		b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		json.Unmarshal(b, &doc)
		d.mu.Lock()
		d.inputs = append(d.inputs, doc.Input)
		d.auths = append(d.auths, r.Header.Get("Authorization"))
		d.mu.Unlock()
		a := answer(doc.Input)
		if a.Hold != nil {
			select {
			case <-a.Hold:
			case <-r.Context().Done():
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		if a.Status != 0 {
			w.WriteHeader(a.Status)
		}
		io.WriteString(w, a.Body)
	})}
	go d.srv.Serve(ln)
	t.Cleanup(d.Close)
	return d
}

// Calls returns the number of documents the service was sent.
func (d *DecisionService) Calls() int64 { return d.calls.Load() }

// Inputs returns the inputs of the documents the service was sent, in
// order.
func (d *DecisionService) Inputs() []map[string]any {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]map[string]any(nil), d.inputs...)
}

// Authorizations returns the Authorization field of each document's
// request ("" none), in order.
func (d *DecisionService) Authorizations() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.auths...)
}

// Close stops the service: its port refuses connections from then on (a
// service down).
func (d *DecisionService) Close() {
	d.srv.Close()
}
