package auth

import (
	"bytes"
	"encoding/base64"
)

// MaxValueLen is the longest Proxy-Authorization value Check considers;
// longer values are refused without decoding, hashing or running bcrypt.
const MaxValueLen = 1024

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
	value = bytes.Trim(value, " \t")
	const scheme = "basic"
	if len(value) < len(scheme)+2 || !bytes.EqualFold(value[:len(scheme)], []byte(scheme)) || value[len(scheme)] != ' ' {
		return nil, nil, false
	}
	token := bytes.TrimLeft(value[len(scheme):], " ")
	if len(token) == 0 {
		return nil, nil, false
	}
	// encoding/base64 skips '\r' and '\n'; refuse anything outside the alphabet.
	for _, c := range token {
		if !isBase64(c) {
			return nil, nil, false
		}
	}
	decoded := make([]byte, basicEncoding.DecodedLen(len(token)))
	n, err := basicEncoding.Decode(decoded, token)
	if err != nil {
		return nil, nil, false
	}
	user, pass, found := bytes.Cut(decoded[:n], []byte{':'})
	if !found || len(user) == 0 {
		return nil, nil, false
	}
	return user, pass, true
}

func isBase64(c byte) bool {
	return ('A' <= c && c <= 'Z') || ('a' <= c && c <= 'z') || ('0' <= c && c <= '9') || c == '+' || c == '/' || c == '='
}
