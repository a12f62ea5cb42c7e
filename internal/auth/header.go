package auth

import (
	"bytes"
	"encoding/base64"
)

// MaxValueLen is the longest Proxy-Authorization value Check considers,
// room for a bearer token (an OIDC token of a CI job is 1-2 KB) or Basic
// credentials carrying one as the password; longer values are refused
// without decoding, hashing or running bcrypt.
const MaxValueLen = 8192

// basicEncoding decodes the token68 of a Basic credential: standard base64
// with padding, non-zero trailing bits refused, so that each user-pass has
// exactly one encoding.
var basicEncoding = base64.StdEncoding.Strict()

// parseBasic splits a Proxy-Authorization value of the form
// `Basic base64(user ":" pass)` into user and pass. The scheme is matched
// case-insensitively; spaces and tabs around the value and one or more spaces
// between scheme and token are allowed. It reports false for any other
// scheme, a token that is not strict padded base64, a decoded credential
// without ':' or with an empty user.
func parseBasic(value []byte) (user, pass []byte, ok bool) {
	token, ok := basicToken(value)
	if !ok {
		return nil, nil, false
	}
	decoded := make([]byte, basicEncoding.DecodedLen(len(token)))
	return splitBasic(decoded, token)
}

// basicToken returns the token68 of a Basic value, as parseBasic reads it.
func basicToken(value []byte) ([]byte, bool) {
	value = bytes.Trim(value, " \t")
	const scheme = "basic"
	if len(value) < len(scheme)+2 || !bytes.EqualFold(value[:len(scheme)], []byte(scheme)) || value[len(scheme)] != ' ' {
		return nil, false
	}
	token := bytes.TrimLeft(value[len(scheme):], " ")
	if len(token) == 0 {
		return nil, false
	}
	// encoding/base64 skips '\r' and '\n'; refuse anything outside the alphabet.
	for _, c := range token {
		if !isBase64(c) {
			return nil, false
		}
	}
	return token, true
}

// splitBasic decodes token into buf, which holds its decoded length, and
// splits it into user and pass, which alias buf.
func splitBasic(buf, token []byte) (user, pass []byte, ok bool) {
	n, err := basicEncoding.Decode(buf, token)
	if err != nil {
		return nil, nil, false
	}
	user, pass, found := bytes.Cut(buf[:n], []byte{':'})
	if !found || len(user) == 0 {
		return nil, nil, false
	}
	return user, pass, true
}

// BasicPassword returns the password of a Proxy-Authorization value of
// the form `Basic base64(user ":" pass)`, as [Authenticator.Check] reads
// it, in a buffer of its own that the caller clears after use; false for
// another scheme, a value that does not decode or one longer than
// MaxValueLen.
func BasicPassword(value []byte) ([]byte, bool) {
	if len(value) > MaxValueLen {
		return nil, false
	}
	token, ok := basicToken(value)
	if !ok {
		return nil, false
	}
	buf := make([]byte, basicEncoding.DecodedLen(len(token)))
	user, pass, ok := splitBasic(buf, token)
	if !ok {
		clear(buf)
		return nil, false
	}
	clear(user)
	return pass, true
}

// AppendBasicUser appends to dst the user name a Proxy-Authorization
// value tries, as [Authenticator.Check] reads it, and returns the extended
// slice: the name of a Basic credential, never its password. For another
// scheme, a value that does not decode or one longer than MaxValueLen it
// returns dst unchanged. It does not allocate beyond growing dst.
func AppendBasicUser(dst, value []byte) []byte {
	if len(value) > MaxValueLen {
		return dst
	}
	token, ok := basicToken(value)
	if !ok {
		return dst
	}
	var buf [MaxValueLen]byte // the decoded token is shorter than value
	user, _, ok := splitBasic(buf[:], token)
	if ok {
		dst = append(dst, user...)
	}
	clear(buf[:])
	return dst
}

// bearerToken returns the token68 of a Bearer value (RFC 6750 section
// 2.1, as a proxy credential): the scheme matched case-insensitively,
// spaces and tabs around the value and one or more spaces after the
// scheme allowed, the token made of letters, digits, '-', '.', '_', '~',
// '+' and '/', then any '='. It reports false for anything else.
func bearerToken(value []byte) ([]byte, bool) {
	value = bytes.Trim(value, " \t")
	const scheme = "bearer"
	if len(value) < len(scheme)+2 || !bytes.EqualFold(value[:len(scheme)], []byte(scheme)) || value[len(scheme)] != ' ' {
		return nil, false
	}
	token := bytes.TrimLeft(value[len(scheme):], " ")
	end := len(token)
	for end > 0 && token[end-1] == '=' {
		end--
	}
	if end == 0 {
		return nil, false
	}
	for _, c := range token[:end] {
		if !isToken68(c) {
			return nil, false
		}
	}
	return token, true
}

func isToken68(c byte) bool {
	return ('A' <= c && c <= 'Z') || ('a' <= c && c <= 'z') || ('0' <= c && c <= '9') ||
		c == '-' || c == '.' || c == '_' || c == '~' || c == '+' || c == '/'
}

func isBase64(c byte) bool {
	return ('A' <= c && c <= 'Z') || ('a' <= c && c <= 'z') || ('0' <= c && c <= '9') || c == '+' || c == '/' || c == '='
}
