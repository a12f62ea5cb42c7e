package proxytest

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// NTLMOrigin is an HTTPS origin (net/http, HTTP/1.1 alone, as IIS
// speaks NTLM) that authenticates its connections as NTLM does: a
// request without Authorization is answered 401 with "WWW-Authenticate:
// Negotiate" and "WWW-Authenticate: NTLM"; one with "Authorization: NTLM
// <type-1 message>" gets 401 "NTLM <type-2 message>" and marks its
// connection challenged; one with "NTLM <type-3 message>" on that same
// connection gets 200 "authenticated on connection N", on any other 401
// again. Only the messages' NTLMSSP signature and type are checked, no
// cryptography. Start one with StartNTLMOrigin.
type NTLMOrigin struct {
	// Addr is "localhost:PORT".
	Addr string

	conns    atomic.Int32 // connections accepted
	h2Resets atomic.Int32 // HTTP/2 streams reset (see StartNTLMOriginH2)
}

// ntlmConnKey is the context key of an NTLMOrigin connection's state.
type ntlmConnKey struct{}

// ntlmConn is what an NTLMOrigin knows of one connection.
type ntlmConn struct {
	n          int32
	challenged atomic.Bool // a type-1 message came on it and was answered
}

// StartNTLMOrigin starts an NTLMOrigin on 127.0.0.1 with TLS and cert,
// speaking HTTP/1.1 alone, closed when the test ends.
func StartNTLMOrigin(t testing.TB, cert tls.Certificate) *NTLMOrigin {
	t.Helper()
	return startNTLMOrigin(t, cert, false)
}

// StartNTLMOriginH2 is StartNTLMOrigin for an origin that, as IIS does
// for NTLM and Negotiate, chooses h2 when offered it and then resets
// every request's stream with HTTP_1_1_REQUIRED (RFC 9113 §7): only
// HTTP/1.1 serves. H2Resets counts the streams reset.
func StartNTLMOriginH2(t testing.TB, cert tls.Certificate) *NTLMOrigin {
	t.Helper()
	return startNTLMOrigin(t, cert, true)
}

func startNTLMOrigin(t testing.TB, cert tls.Certificate, h2 bool) *NTLMOrigin {
	t.Helper()
	o := &NTLMOrigin{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxytest: listen: %v", err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(o.serve), ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}},
		ErrorLog:  log.New(io.Discard, "", 0),
		// Set, even empty, it keeps net/http from speaking h2.
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){},
		ConnContext: func(ctx context.Context, _ net.Conn) context.Context {
			return context.WithValue(ctx, ntlmConnKey{}, &ntlmConn{n: o.conns.Add(1)})
		}}
	if h2 {
		srv.TLSConfig.NextProtos = []string{"h2", "http/1.1"}
		srv.TLSNextProto["h2"] = func(_ *http.Server, c *tls.Conn, _ http.Handler) {
			ResetH2Streams(c, func() { o.h2Resets.Add(1) })
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("proxytest: NTLM origin: %v", err)
		}
	}()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	o.Addr = "localhost:" + port
	return o
}

// Conns returns how many connections the origin has accepted.
func (o *NTLMOrigin) Conns() int { return int(o.conns.Load()) }

// H2Resets returns how many HTTP/2 streams the origin reset with
// HTTP_1_1_REQUIRED.
func (o *NTLMOrigin) H2Resets() int { return int(o.h2Resets.Load()) }

// ResetH2Streams speaks HTTP/2 on c, a server's connection whose client
// chose h2, as IIS does for NTLM and Negotiate: the client's preface and
// SETTINGS are taken, and each request's HEADERS answered with
// RST_STREAM(HTTP_1_1_REQUIRED), reset called before each (nil: none),
// until the client goes or a minute has passed. It closes c. Set as an
// http.Server's TLSNextProto["h2"], it makes an origin that serves over
// HTTP/1.1 alone though it chooses h2.
func ResetH2Streams(c net.Conn, reset func()) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute))
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(c, preface); err != nil || string(preface) != http2.ClientPreface {
		return
	}
	fr := http2.NewFramer(c, c)
	if fr.WriteSettings() != nil {
		return
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() && fr.WriteSettingsAck() != nil {
				return
			}
		case *http2.HeadersFrame:
			if reset != nil {
				reset()
			}
			if fr.WriteRSTStream(f.StreamID, http2.ErrCodeHTTP11Required) != nil {
				return
			}
		case *http2.PingFrame:
			if !f.IsAck() && fr.WritePing(true, f.Data) != nil {
				return
			}
		case *http2.GoAwayFrame:
			return
		}
	}
}

// serve answers one request as the NTLMOrigin's documentation says.
func (o *NTLMOrigin) serve(w http.ResponseWriter, r *http.Request) {
	c := r.Context().Value(ntlmConnKey{}).(*ntlmConn)
	scheme, msg, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	if !strings.EqualFold(scheme, "NTLM") {
		w.Header().Add("WWW-Authenticate", "Negotiate")
		w.Header().Add("WWW-Authenticate", "NTLM")
		w.WriteHeader(401)
		io.WriteString(w, "401 authenticate with NTLM\n")
		return
	}
	switch NTLMMessageType(msg) {
	case 1:
		c.challenged.Store(true)
		w.Header().Set("WWW-Authenticate", "NTLM "+NTLMChallenge())
		w.WriteHeader(401)
		io.WriteString(w, "401 NTLM challenge\n")
	case 3:
		if c.challenged.Load() {
			fmt.Fprintf(w, "authenticated on connection %d\n", c.n)
			return
		}
		w.Header().Set("WWW-Authenticate", "NTLM")
		w.WriteHeader(401)
		io.WriteString(w, "401 NTLM answer on another connection than the challenge\n")
	default:
		w.Header().Set("WWW-Authenticate", "NTLM")
		w.WriteHeader(401)
		io.WriteString(w, "401 not an NTLM message\n")
	}
}

// ntlmSignature starts every NTLM message.
const ntlmSignature = "NTLMSSP\x00"

// NTLMMessageType returns the type (1, 2 or 3) of the NTLM message b64,
// in base64; 0 when it is none.
func NTLMMessageType(b64 string) int {
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(b64))
	if err != nil || len(b) < 12 || !bytes.HasPrefix(b, []byte(ntlmSignature)) {
		return 0
	}
	switch t := binary.LittleEndian.Uint32(b[8:12]); t {
	case 1, 2, 3:
		return int(t)
	}
	return 0
}

// NTLMMessage returns an NTLM message of type typ in base64: its
// signature and type, then zeros to 48 bytes (no fields, no
// cryptography), as a client's type-1 or type-3 for an NTLMOrigin.
func NTLMMessage(typ uint32) string {
	b := make([]byte, 48)
	copy(b, ntlmSignature)
	binary.LittleEndian.PutUint32(b[8:], typ)
	return base64.StdEncoding.EncodeToString(b)
}

// NTLMChallenge returns a type-2 (challenge) message in base64 that
// curl's NTLM accepts: no target name, no target information, the flags
// NEGOTIATE_UNICODE and NEGOTIATE_NTLM, a fixed server challenge.
func NTLMChallenge() string {
	b := make([]byte, 48)
	copy(b, ntlmSignature)
	binary.LittleEndian.PutUint32(b[8:], 2)
	binary.LittleEndian.PutUint32(b[16:], 48)         // target name's offset (its length is 0)
	binary.LittleEndian.PutUint32(b[20:], 0x00000201) // flags
	copy(b[24:32], "\x01\x23\x45\x67\x89\xab\xcd\xef")
	binary.LittleEndian.PutUint32(b[44:], 48) // target information's offset (its length is 0)
	return base64.StdEncoding.EncodeToString(b)
}
