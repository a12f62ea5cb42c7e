//go:build linux

package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// benchIssuer is the iss of the rustle-jwt column's token.
const benchIssuer = "https://issuer.bench.invalid"

// prepareRustleLDAP builds rustle (as its own column does) and starts the
// directory of the rustle-ldap column: slapd on a loopback port, pinned
// to the load core, with the campaign's user loaded by slapadd. stopAll
// stops it with the campaign.
func prepareRustleLDAP(ctx context.Context, e *env) (string, error) {
	v, err := prepareRustle(ctx, e)
	if err != nil || e.ldapURL != "" {
		return v, err
	}
	slapd, ok := e.lookPath["slapd"]
	if !ok {
		return "", fmt.Errorf("slapd is not installed (Debian package slapd)")
	}
	dir := filepath.Join(e.tmp, "slapd")
	if err := os.MkdirAll(filepath.Join(dir, "db"), 0o700); err != nil {
		return "", fmt.Errorf("campaign: %w", err)
	}
	conf, ldif := filepath.Join(dir, "slapd.conf"), filepath.Join(dir, "directory.ldif")
	d := e.confData(dir, lnHTTP, 0, 1)
	if err := e.writeConfData("slapd.conf", conf, d); err != nil {
		return "", err
	}
	if err := e.writeConfData("directory.ldif", ldif, d); err != nil {
		return "", err
	}
	slapadd := filepath.Join(filepath.Dir(slapd), "slapadd")
	if out, err := exec.CommandContext(ctx, slapadd, "-f", conf, "-l", ldif).CombinedOutput(); err != nil {
		return "", fmt.Errorf("slapadd: %v: %s", err, firstLines(string(out), 3))
	}
	port, err := freePort()
	if err != nil {
		return "", err
	}
	url := "ldap://127.0.0.1:" + strconv.Itoa(port)
	p, err := startProc("slapd", []int{e.loadCore}, []string{slapd, "-d", "0", "-f", conf, "-h", url + "/"}, nil,
		filepath.Join(dir, "output.log"), nil)
	if err != nil {
		return "", err
	}
	if err := waitListening(ctx, "127.0.0.1:"+strconv.Itoa(port), p, 30*time.Second); err != nil {
		p.stop(3 * time.Second)
		return "", fmt.Errorf("slapd: %w", err)
	}
	e.ldapURL = url
	if out, err := exec.CommandContext(ctx, slapd, "-VV").CombinedOutput(); err == nil {
		v += ", against " + firstLines(string(out), 1)
	}
	return v, nil
}

// prepareRustleRedis builds rustle (as its own column does) and starts
// the Redis of the rustle-redis column: Debian's redis-server on a
// loopback port, without persistence, pinned to the load core. stopAll
// stops it with the campaign.
func prepareRustleRedis(ctx context.Context, e *env) (string, error) {
	v, err := prepareRustle(ctx, e)
	if err != nil || e.redisURL != "" {
		return v, err
	}
	redis, ok := e.lookPath["redis-server"]
	if !ok {
		return "", fmt.Errorf("redis-server is not installed (Debian package redis-server)")
	}
	dir := filepath.Join(e.tmp, "redis")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("campaign: %w", err)
	}
	port, err := freePort()
	if err != nil {
		return "", err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	p, err := startProc("redis-server", []int{e.loadCore}, []string{redis, "--bind", "127.0.0.1", "--port", strconv.Itoa(port),
		"--save", "", "--appendonly", "no", "--dir", dir}, nil, filepath.Join(dir, "output.log"), nil)
	if err != nil {
		return "", err
	}
	if err := waitListening(ctx, addr, p, 30*time.Second); err != nil {
		p.stop(3 * time.Second)
		return "", fmt.Errorf("redis-server: %w", err)
	}
	e.redisURL = "redis://" + addr + "/0"
	if out, err := exec.CommandContext(ctx, redis, "--version").CombinedOutput(); err == nil {
		v += ", against " + firstLines(string(out), 1)
	}
	return v, nil
}

// prepareRustleJWT builds rustle and starts what the rustle-jwt column
// needs: an ES256 key, its key set served on a loopback port by the
// campaign itself, and a token of the campaign's user valid for a day.
func prepareRustleJWT(ctx context.Context, e *env) (string, error) {
	v, err := prepareRustle(ctx, e)
	if err != nil || e.jwksURL != "" {
		return v, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", fmt.Errorf("campaign: %w", err)
	}
	raw, err := key.PublicKey.Bytes()
	if err != nil {
		return "", fmt.Errorf("campaign: %w", err)
	}
	b64 := base64.RawURLEncoding.EncodeToString
	doc, err := json.Marshal(map[string]any{"keys": []map[string]string{{
		"kty": "EC", "crv": "P-256", "kid": "bench", "use": "sig", "alg": "ES256", "x": b64(raw[1:33]), "y": b64(raw[33:]),
	}}})
	if err != nil {
		return "", fmt.Errorf("campaign: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("campaign: %w", err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(doc)
	}), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln) // ends with the campaign's process
	tok := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{
		"iss": benchIssuer, "aud": "rustle-bench", "sub": e.user, "iat": time.Now().Unix(),
		"exp": time.Now().Add(24 * time.Hour).Unix(),
	})
	tok.Header["kid"] = "bench"
	if e.token, err = tok.SignedString(key); err != nil {
		return "", fmt.Errorf("campaign: sign the token: %w", err)
	}
	e.jwksURL = "http://" + ln.Addr().String() + "/jwks"
	return v, nil
}

// prepareRustleAuthz builds rustle and starts the decision service of
// the rustle-authz column, served by the campaign itself on a loopback
// port in the shape of OPA's data API: it allows the campaign's user and
// denies everyone else, so that a request the column serves has passed
// through it.
func prepareRustleAuthz(ctx context.Context, e *env) (string, error) {
	v, err := prepareRustle(ctx, e)
	if err != nil || e.authzURL != "" {
		return v, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("campaign: %w", err)
	}
	user := e.user
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var doc struct {
			Input struct {
				User string `json:"user"`
			} `json:"input"`
		}
		json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&doc)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"result":{"allow":%t}}`, doc.Input.User == user)
	}), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln) // ends with the campaign's process
	e.authzURL = "http://" + ln.Addr().String() + "/v1/data/rustle/authz"
	return v, nil
}
