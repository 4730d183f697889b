package wire

import (
	"errors"
	"testing"
)

func TestTokenCheck(t *testing.T) {
	tok := NewToken("s3cret")
	f := func(header string, want error) {
		t.Helper()
		if got := tok.Check(header); !errors.Is(got, want) {
			t.Errorf("Check(%q): got %v; want %v", header, got, want)
		}
	}
	f("Bearer s3cret", nil)
	f("Bearer  s3cret ", nil)
	f("", ErrNoToken)
	f("Basic s3cret", ErrNoToken)
	f("bearer s3cret", nil) // the scheme is case-insensitive (RFC 9110 11.1)
	f("BEARER s3cret", nil)
	f("Bearer s3cre", ErrWrongToken)
	f("Bearer s3cret2", ErrWrongToken)
	f("Bearer ", ErrNoToken)
	f("Bearer x y", ErrWrongToken)
	if tok.Open() {
		t.Error("a token with a value reports Open")
	}
	open := NewToken("")
	if !open.Open() || open.Check("") != nil || open.Check("Bearer anything") != nil {
		t.Error("NewToken(\"\") must accept every request")
	}
	var zero Token
	if !zero.Open() || zero.Check("") != nil {
		t.Error("the zero Token must accept every request")
	}
}
