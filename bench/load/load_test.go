package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/textproto"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestParseSteps(t *testing.T) {
	tests := []struct {
		in      string
		want    []int
		wantErr bool
	}{
		{in: "1000,5000,9000", want: []int{1000, 5000, 9000}},
		{in: " 1 , 2 ", want: []int{1, 2}},
		{in: "5,5", wantErr: true},
		{in: "9,1", wantErr: true},
		{in: "0", wantErr: true},
		{in: "x", wantErr: true},
	}
	for _, tt := range tests {
		got, err := parseSteps(tt.in)
		if (err != nil) != tt.wantErr || (err == nil && !equal(got, tt.want)) {
			t.Errorf("parseSteps(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// fakeProxy answers CONNECT with status for the test's lifetime; with 200
// it then echoes what the client sends. It records the request heads.
func fakeProxy(t *testing.T, status string) (string, func() []textproto.MIMEHeader) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var heads []textproto.MIMEHeader
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				tp := textproto.NewReader(bufio.NewReader(c))
				if _, err := tp.ReadLine(); err != nil {
					return
				}
				h, err := tp.ReadMIMEHeader()
				if err != nil {
					return
				}
				mu.Lock()
				heads = append(heads, h)
				mu.Unlock()
				io.WriteString(c, "HTTP/1.1 "+status+"\r\nX-Test: 1\r\n\r\n")
				if strings.HasPrefix(status, "200") {
					io.Copy(c, tp.R)
				}
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	return ln.Addr().String(), func() []textproto.MIMEHeader {
		mu.Lock()
		defer mu.Unlock()
		return append([]textproto.MIMEHeader(nil), heads...)
	}
}

func TestDialAndEcho(t *testing.T) {
	addr, heads := fakeProxy(t, "200 Connection established")
	d := newDialer(addr, "bench:secret", "127.0.0.1:9", 5*time.Second)
	var errs errorLog
	tunnels := openParallel(context.Background(), d, 5, 2, &errs, echo)
	for _, tc := range tunnels {
		tc.Close()
	}
	if len(tunnels) != 5 || errs.n.Load() != 0 {
		t.Fatalf("opened %d tunnels with %d errors (%s), want 5 and 0", len(tunnels), errs.n.Load(), errs.firstText())
	}
	h := heads()[0]
	if got := h.Get("Proxy-Authorization"); got != "Basic YmVuY2g6c2VjcmV0" {
		t.Errorf("Proxy-Authorization = %q", got)
	}
	if got := h.Get("Host"); got != "127.0.0.1:9" {
		t.Errorf("Host = %q", got)
	}
}

func TestDialRefused(t *testing.T) {
	addr, _ := fakeProxy(t, "407 Proxy Authentication Required")
	d := newDialer(addr, "", "127.0.0.1:9", 5*time.Second)
	_, err := d.dial(context.Background())
	if !errors.Is(err, errStatus) {
		t.Errorf("dial error = %v, want errStatus", err)
	}
}
