package fleet

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/narwhal-io/narwhal/core/wire"
)

// DefaultMaxBody is the body limit Handler uses when given maxBody <= 0.
const DefaultMaxBody = 4 << 20

// Handler returns the ingest endpoint (POST a wire.Batch, answered with a
// wire.Ack). Answers: 200 when at least one report was applied; 409 when
// every report was refused (stale or future epoch, replay, registry full:
// the agent must not resend them, and treats it as a failure); 400
// malformed JSON, an unknown field or an invalid report (nothing applied); 401 bad or missing
// token; 405 not POST; 413 body over maxBody; 415 not JSON. An empty token
// disables authentication. now gives the core's clock in Unix ns.
func (r *Registry) Handler(token string, maxBody int64, now func() int64) http.Handler {
	if maxBody <= 0 {
		maxBody = DefaultMaxBody
	}
	auth := wire.NewToken(token)
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeErr(w, http.StatusMethodNotAllowed, "method "+req.Method+" not allowed: POST a wire.Batch")
			return
		}
		if err := auth.Check(req.Header.Get("Authorization")); err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="narwhal"`)
			writeErr(w, http.StatusUnauthorized, err.Error())
			return
		}
		if ct := req.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
			writeErr(w, http.StatusUnsupportedMediaType, "content type "+ct+": want application/json")
			return
		}
		req.Body = http.MaxBytesReader(w, req.Body, maxBody)
		var b wire.Batch
		dec := json.NewDecoder(req.Body)
		dec.DisallowUnknownFields() // like events: a misspelt field must not drop data silently
		if err := dec.Decode(&b); err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				writeErr(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body over %d bytes", maxBody))
				return
			}
			writeErr(w, http.StatusBadRequest, "malformed batch: "+err.Error())
			return
		}
		if dec.More() {
			writeErr(w, http.StatusBadRequest, "malformed batch: trailing data after the JSON object")
			return
		}
		if err := b.Validate(); err != nil {
			r.reports.WithLabelValues("invalid").Add(float64(len(b.Reports)))
			writeErr(w, http.StatusBadRequest, err.Error())
			return
		}
		ack := r.applyBatch(now(), &b)
		status := http.StatusOK
		if ack.Accepted == 0 {
			status = http.StatusConflict
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(ack)
	})
}

func (r *Registry) applyBatch(nowNs int64, b *wire.Batch) wire.Ack {
	var ack wire.Ack
	for i := range b.Reports {
		rep := &b.Reports[i]
		if err := r.apply(nowNs, rep); err != nil {
			ack.Rejected = append(ack.Rejected, wire.Rejection{Seq: rep.Seq, Reason: err.Error()})
			continue
		}
		ack.Accepted++
	}
	if len(b.Reports) > 0 {
		if n, ok := r.nodes.Load(b.Reports[len(b.Reports)-1].Node); ok {
			n.mu.Lock()
			ack.Epoch, ack.LastSeq = n.epoch, n.lastSeq
			n.mu.Unlock()
		}
	}
	return ack
}

func writeErr(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(wire.Error{Error: msg})
}
