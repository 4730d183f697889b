package service

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/narwhal-io/narwhal/core/wire"
)

// Token rotation. A Kubernetes Secret mounted as a volume (not with
// subPath) is updated in place when the Secret changes; agents already
// read their token file again for every batch they send. The service reads
// auth.token_file and auth.agent_token_file again every
// auth.token_reload_s, so a rotated Secret reaches it without a restart.
// A token file holds one token per line (blank lines ignored, at most
// maxTokensPerFile): during a rotation it lists the new token and the
// old one, and every listed token is accepted, so the writers can move
// over one by one; the first line is the one this process sends itself
// (a replica's demand deltas to the leader, an agent's reports). A
// reload that cannot be read, holds no token, or lists one of the other
// file's tokens changes nothing: the tokens accepted before stay, the
// error is logged once per change and counted in
// narwhal_auth_token_reloads_total{result="error"}.

const (
	// maxTokensPerFile bounds a token file: the new and the old token
	// of a rotation, with room for a mistake, not a user list.
	maxTokensPerFile = 8
	// maxTokenFileBytes bounds what a reload reads.
	maxTokenFileBytes = 64 << 10
)

// parseTokens reads a token file's content: one token per line,
// surrounding white space and blank lines ignored.
func parseTokens(b []byte) ([]string, error) {
	var toks []string
	seen := map[string]bool{}
	for _, line := range bytes.Split(b, []byte("\n")) {
		t := string(bytes.TrimSpace(line))
		if t == "" || seen[t] {
			continue
		}
		seen[t] = true
		toks = append(toks, t)
	}
	switch {
	case len(toks) == 0:
		return nil, errors.New("holds no token")
	case len(toks) > maxTokensPerFile:
		return nil, fmt.Errorf("holds %d tokens, at most %d (one per line: the new and the old during a rotation)", len(toks), maxTokensPerFile)
	}
	return toks, nil
}

// readTokenFile reads and parses a token file, at most maxTokenFileBytes.
func readTokenFile(path string) (raw []byte, toks []string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	raw, err = io.ReadAll(io.LimitReader(f, maxTokenFileBytes+1))
	if err != nil {
		return nil, nil, err
	}
	if len(raw) > maxTokenFileBytes {
		return nil, nil, fmt.Errorf("is larger than %d bytes", maxTokenFileBytes)
	}
	toks, err = parseTokens(raw)
	return raw, toks, err
}

// tokenSet is one write token's accepted values at one time.
type tokenSet struct {
	raw    []byte   // the file's content (nil for a fixed token)
	clear  []string // the tokens, for the overlap check
	first  string
	tokens []wire.Token
}

func newTokenSet(raw []byte, toks []string) *tokenSet {
	s := &tokenSet{raw: raw, clear: toks}
	for i, t := range toks {
		if i == 0 {
			s.first = t
		}
		s.tokens = append(s.tokens, wire.NewToken(t))
	}
	return s
}

// tokenSource is one write token (the routers' or the agents'): fixed
// when it comes from the config or the environment, else read from its
// file and read again by reload.
type tokenSource struct {
	name  string // "token" or "agent_token": the setting and the metric label
	file  string
	cur   atomic.Pointer[tokenSet]
	other *tokenSource

	mu      sync.Mutex // one reload at a time; lastErr
	lastErr string
	log     *slog.Logger
	reloads *prometheus.CounterVec // nil: not counted
}

// newTokenSource: token is the fixed token, or the file's first token
// as Config.Validate read it; file the file to read again ("" fixed).
func newTokenSource(name, token, file string, logger *slog.Logger, reloads *prometheus.CounterVec) *tokenSource {
	s := &tokenSource{name: name, file: file, log: logger, reloads: reloads}
	var toks []string
	var raw []byte
	if file != "" {
		// Validate read it moments ago; a failure now keeps the token it read.
		if r, t, err := readTokenFile(file); err == nil {
			raw, toks = r, t
		}
	}
	if toks == nil && token != "" {
		toks = []string{token}
	}
	s.cur.Store(newTokenSet(raw, toks))
	return s
}

// open reports whether the source accepts every request (no token).
func (s *tokenSource) open() bool { return len(s.cur.Load().tokens) == 0 }

// current is the token this process sends (the file's first line).
func (s *tokenSource) current() string { return s.cur.Load().first }

// check judges an Authorization header: nil when it carries one of the
// accepted tokens. Every token is compared, matched or not.
func (s *tokenSource) check(authorization string) error {
	set := s.cur.Load()
	if len(set.tokens) == 0 {
		return nil
	}
	err := wire.ErrWrongToken
	for _, t := range set.tokens {
		switch e := t.Check(authorization); {
		case e == nil:
			err = nil
		case errors.Is(e, wire.ErrNoToken):
			return e
		}
	}
	return err
}

// reload reads the file again; a changed, valid content replaces the
// accepted tokens. It reports whether they changed.
func (s *tokenSource) reload() (bool, error) {
	if s == nil || s.file == "" {
		return false, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	raw, toks, err := readTokenFile(s.file)
	if err == nil && bytes.Equal(raw, s.cur.Load().raw) {
		s.lastErr = ""
		return false, nil
	}
	if err == nil && s.other != nil {
		err = s.other.shares(toks)
	}
	if err != nil {
		err = fmt.Errorf("auth.%s_file %q: %w; the tokens accepted before stay", s.name, s.file, err)
		if s.reloads != nil {
			s.reloads.WithLabelValues(s.name, "error").Inc()
		}
		if msg := err.Error(); msg != s.lastErr {
			s.lastErr = msg
			s.log.Error("token file not reloaded", "err", err)
		}
		return false, err
	}
	s.lastErr = ""
	s.cur.Store(newTokenSet(raw, toks))
	if s.reloads != nil {
		s.reloads.WithLabelValues(s.name, "ok").Inc()
	}
	s.log.Info("token file reloaded", "setting", "auth."+s.name+"_file", "tokens", len(toks))
	return true, nil
}

// shares refuses toks when one of them is also this source's token:
// routers and agents must hold different tokens.
func (s *tokenSource) shares(toks []string) error {
	for _, t := range toks {
		for _, o := range s.cur.Load().clear {
			if t == o {
				return fmt.Errorf("lists a token of auth.%s too; routers and agents hold different tokens", s.name)
			}
		}
	}
	return nil
}

// authTokens: the routers' and the agents' write tokens.
type authTokens struct {
	router, agent *tokenSource
	reloads       *prometheus.CounterVec
}

func newAuthTokens(a AuthConfig, logger *slog.Logger) *authTokens {
	reloads := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "narwhal_auth_token_reloads_total",
		Help: "Token files read again after they changed (auth.token_file, auth.agent_token_file), by token (token, agent_token) and result (ok; error: the tokens accepted before stay)."},
		[]string{"token", "result"})
	at := &authTokens{reloads: reloads,
		router: newTokenSource("token", a.Token, a.TokenFile, logger, reloads),
		agent:  newTokenSource("agent_token", a.AgentToken, a.AgentTokenFile, logger, reloads)}
	at.router.other, at.agent.other = at.agent, at.router
	return at
}

// reload reads both files again (errors are logged and counted).
func (a *authTokens) reload() {
	_, _ = a.router.reload()
	_, _ = a.agent.reload()
}

// hasFile reports whether a token comes from a file (else nothing to reload).
func (a *authTokens) hasFile() bool { return a.router.file != "" || a.agent.file != "" }

// followedToken is src's current token for one goroutine that sends it
// (a replica shipping demand deltas), reading the file again at most
// every everyNs (0: never).
func followedToken(src *tokenSource, everyNs int64, now func() int64) func() string {
	last := now()
	return func() string {
		if t := now(); everyNs > 0 && t-last >= everyNs {
			last = t
			_, _ = src.reload()
		}
		return src.current()
	}
}

// RouterToken is the routers' write token as one goroutine that sends it
// reads it (a replica shipping demand deltas to the leader): auth.token or
// auth.token_file, the file read again at most every auth.token_reload_s.
// A bad reload keeps the token read before (the server logs and counts
// it; this copy only follows).
func (c *Config) RouterToken() func() string {
	src := newTokenSource("token", c.Auth.Token, c.Auth.TokenFile, slog.New(slog.DiscardHandler), nil)
	return followedToken(src, int64(math.Round(c.Auth.TokenReloadS*1e9)), func() int64 { return time.Now().UnixNano() })
}
