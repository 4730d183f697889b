package wire

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"strings"
)

// Errors of Token.Check, comparable with errors.Is.
var (
	ErrNoToken    = errors.New("missing bearer token")
	ErrWrongToken = errors.New("wrong bearer token")
)

// Token checks the "Authorization: Bearer <token>" header of every write to
// the core (agent reports, router events, demand deltas): one mechanism for
// every endpoint. Both sides are hashed with SHA-256 before a constant-time
// compare, so the comparison leaks neither content nor length. The zero
// Token (or NewToken("")) is open: it accepts every request.
type Token struct {
	want [sha256.Size]byte
	set  bool
}

// NewToken returns a Token that accepts exactly token ("" accepts all).
func NewToken(token string) Token {
	if token == "" {
		return Token{}
	}
	return Token{want: sha256.Sum256([]byte(token)), set: true}
}

// Open reports whether the token accepts every request.
func (t Token) Open() bool { return !t.set }

// Check judges an Authorization header value: nil when it carries the
// token (surrounding white space ignored) or the Token is open.
func (t Token) Check(authorization string) error {
	if !t.set {
		return nil
	}
	// The scheme is case-insensitive (RFC 9110 section 11.1).
	scheme, tok, ok := strings.Cut(strings.TrimSpace(authorization), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ErrNoToken
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	if subtle.ConstantTimeCompare(got[:], t.want[:]) != 1 {
		return ErrWrongToken
	}
	return nil
}
