package demandmerge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"
)

// HeaderInstance carries the receiving store's Instance in every answer.
const HeaderInstance = "X-Narwhal-Merge-Instance"

// ErrNotLeader is returned by Post when the receiver is not the leader
// (HTTP 409): the router should look the leader up again.
var ErrNotLeader = errors.New("demandmerge: receiver is not the leader")

// Handler accepts POSTed JSON deltas into s. isLeader, when not nil, makes
// a follower answer 409 so routers find the leader. Bodies over maxBody
// bytes get 413; invalid deltas 400 (nothing applied); applied or
// duplicate deltas 204.
func Handler(s *Store, maxBody int64, isLeader func() bool, logger *slog.Logger) http.Handler {
	if logger == nil {
		logger = slog.Default()
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "POST only", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set(HeaderInstance, s.Instance())
		if isLeader != nil && !isLeader() {
			http.Error(w, "not the leader", http.StatusConflict)
			return
		}
		var d Delta
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&d); err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
				return
			}
			http.Error(w, "bad delta: "+err.Error(), http.StatusBadRequest)
			return
		}
		if err := s.Apply(&d); err != nil {
			logger.Warn("refused demand delta", "router", d.Router, "epoch", d.Epoch, "seq", d.Seq, "err", err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

// Post sends d to the leader's handler at url with an optional bearer
// token. A nil error means the leader holds it (acknowledge it with
// Exporter.Ack); instance is the receiving store's Instance.
func Post(ctx context.Context, c *http.Client, url, token string, d *Delta) (instance string, err error) {
	body, err := json.Marshal(d)
	if err != nil {
		return "", fmt.Errorf("demandmerge: encode delta: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return "", fmt.Errorf("demandmerge: post delta: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", fmt.Errorf("demandmerge: post delta: %w", err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	instance = resp.Header.Get(HeaderInstance)
	switch {
	case resp.StatusCode == http.StatusConflict:
		return instance, ErrNotLeader
	case resp.StatusCode/100 != 2:
		return instance, fmt.Errorf("demandmerge: post delta: status %d: %s", resp.StatusCode, bytes.TrimSpace(msg))
	}
	return instance, nil
}

// Ship sends x's deltas to url every period until ctx ends, reading the
// wall clock for "closed before". When the receiving store's instance
// changes (a new leader), it resends everything the router retains.
// Errors are logged and retried at the next period. token is called
// before each post, so a rotated token is sent once read.
func Ship(ctx context.Context, x *Exporter, c *http.Client, url string, token func() string, every time.Duration, logger *slog.Logger) {
	if logger == nil {
		logger = slog.Default()
	}
	t := time.NewTicker(every)
	defer t.Stop()
	var instance string
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			d, ok := x.Next(now.UnixNano())
			if !ok {
				d = x.Heartbeat()
			}
			got, err := Post(ctx, c, url, token(), &d)
			if err != nil {
				logger.Warn("demand delta not delivered", "seq", d.Seq, "err", err)
				continue
			}
			if instance != "" && got != instance {
				logger.Info("leader store changed; resending retained buckets", "from", instance, "to", got)
				x.Reset()
				instance = got
				continue
			}
			instance = got
			if ok {
				x.Ack(d.Seq)
			}
		}
	}
}
