package origin_test

import (
	"testing"

	"github.com/rustle-proxy/rustle/internal/origin"
)

// TestMaxForwards checks how a TRACE's or OPTIONS's Max-Forwards is read
// (RFC 9110 §7.6.2): 0 is answered here, n is forwarded as n-1, a field
// that is not a number is malformed, none is left alone.
func TestMaxForwards(t *testing.T) {
	tests := []struct {
		value   string
		present bool
		next    int
		here    bool
		ok      bool
	}{
		{"", false, -1, false, true},
		{"0", true, -1, true, true},
		{" 0 ", true, -1, true, true},
		{"00", true, -1, true, true},
		{"1", true, 0, false, true},
		{"10", true, 9, false, true},
		{"\t7", true, 6, false, true},
		{"99999999999999999999999", true, 1<<30 - 1, false, true},
		{"", true, -1, false, false},
		{"-1", true, -1, false, false},
		{"1, 2", true, -1, false, false},
		{"0x1", true, -1, false, false},
		{"one", true, -1, false, false},
	}
	for _, tt := range tests {
		next, here, ok := origin.MaxForwards(tt.value, tt.present)
		if next != tt.next || here != tt.here || ok != tt.ok {
			t.Errorf("MaxForwards(%q, %v) = %d, %v, %v; want %d, %v, %v", tt.value, tt.present, next, here, ok, tt.next, tt.here, tt.ok)
		}
		bnext, bhere, bok := origin.MaxForwards([]byte(tt.value), tt.present)
		if bnext != next || bhere != here || bok != ok {
			t.Errorf("MaxForwards([]byte(%q)) differs from the string's", tt.value)
		}
	}
	for _, m := range []string{"TRACE", "OPTIONS"} {
		if !origin.HopLimited(m) || !origin.HopLimited([]byte(m)) {
			t.Errorf("HopLimited(%q) = false", m)
		}
	}
	for _, m := range []string{"GET", "trace", "CONNECT", "POST"} {
		if origin.HopLimited(m) {
			t.Errorf("HopLimited(%q) = true", m)
		}
	}
	if got := string(origin.AppendMaxForwards(nil, 4)); got != "Max-Forwards: 4\r\n" {
		t.Errorf("AppendMaxForwards(4) = %q", got)
	}
	if got := origin.AppendMaxForwards(nil, -1); len(got) != 0 {
		t.Errorf("AppendMaxForwards(-1) = %q", got)
	}
}

// TestTraceEcho checks rustle's echo of a TRACE: the request line and
// the fields as received, less the credentials and cookies.
func TestTraceEcho(t *testing.T) {
	b := origin.AppendTraceLine(nil, "TRACE", "http://origin.test/x", "HTTP/1.1")
	for _, f := range [][2]string{
		{"Host", "origin.test"},
		{"Proxy-Authorization", "Basic YWxpY2U6cHc="},
		{"authorization", "Bearer t0ken"},
		{"COOKIE", "sid=s3cret"},
		{"Max-Forwards", "0"},
		{"Via", "1.0 fred"},
	} {
		b = origin.AppendTraceField(b, f[0], f[1])
	}
	want := "TRACE http://origin.test/x HTTP/1.1\r\nHost: origin.test\r\nMax-Forwards: 0\r\nVia: 1.0 fred\r\n"
	if string(b) != want {
		t.Errorf("echo %q, want %q", b, want)
	}
	for _, name := range []string{"proxy-authorization", "Authorization", "cookie"} {
		if !origin.TraceHidden(name) || !origin.TraceHidden([]byte(name)) {
			t.Errorf("TraceHidden(%q) = false", name)
		}
	}
	for _, name := range []string{"set-cookie", "host", "x-authorization", "authorizatio"} {
		if origin.TraceHidden(name) {
			t.Errorf("TraceHidden(%q) = true", name)
		}
	}
}
