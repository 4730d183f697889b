package servicetest

import (
	"errors"
	"fmt"
	"sync"
)

// ErrUnknownEngine mirrors the facade's sentinel.
var ErrUnknownEngine = errors.New("unknown engine")

// Call is one recorded lifecycle call with its arguments in order.
type Call struct {
	Method string
	Args   [5]int64
	Engine string
}

// Recorder is a concurrency-safe fake EventSink.
type Recorder struct {
	mu      sync.Mutex
	engines map[string]bool
	calls   []Call
	// Pending mirrors demand_history.unsized.pending.
	pending int64
}

// NewRecorder knows the given engine ids.
func NewRecorder(engines ...string) *Recorder {
	r := &Recorder{engines: map[string]bool{}}
	for _, e := range engines {
		r.engines[e] = true
	}
	return r
}

// Calls returns a copy of the recorded calls.
func (r *Recorder) Calls() []Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Call(nil), r.calls...)
}

// Len is the number of recorded calls.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.calls)
}

// Pending is the count of offers started and not yet sized or abandoned.
func (r *Recorder) Pending() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pending
}

func (r *Recorder) rec(m string, eng string, args ...int64) error {
	for _, a := range args {
		if a < 0 {
			return fmt.Errorf("%s: negative argument %d", m, a)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if m == "Admitted" && !r.engines[eng] {
		return fmt.Errorf("%w: %q", ErrUnknownEngine, eng)
	}
	c := Call{Method: m, Engine: eng}
	copy(c.Args[:], args)
	r.calls = append(r.calls, c)
	switch m {
	case "OfferStarted":
		r.pending++
	case "OfferAbandoned", "OfferSized", "Refused": // as the core: RefusedSized ends none
		if r.pending > 0 {
			r.pending--
		}
	}
	return nil
}

func (r *Recorder) OfferStarted(nowNs int64)         { _ = r.rec("OfferStarted", "", nowNs) }
func (r *Recorder) OfferAbandoned(nowNs int64) error { return r.rec("OfferAbandoned", "", nowNs) }
func (r *Recorder) OfferSized(arrivalNs, estInput, reqOutput int64) error {
	return r.rec("OfferSized", "", arrivalNs, estInput, reqOutput)
}
func (r *Recorder) Tokenized(arrivalNs, estInput, exactInput, reqOutput int64) error {
	return r.rec("Tokenized", "", arrivalNs, estInput, exactInput, reqOutput)
}
func (r *Recorder) Admitted(nowNs int64, engineID string, input, reqOutput int64) error {
	return r.rec("Admitted", engineID, nowNs, input, reqOutput)
}
func (r *Recorder) Refused(nowNs int64) error { return r.rec("Refused", "", nowNs) }
func (r *Recorder) RefusedSized(nowNs, arrivalNs int64) error {
	return r.rec("RefusedSized", "", nowNs, arrivalNs)
}
func (r *Recorder) FirstToken(nowNs, arrivalNs int64) error {
	return r.rec("FirstToken", "", nowNs, arrivalNs)
}
func (r *Recorder) Completed(nowNs, arrivalNs, firstTokenNs, reqOutput, outputTokens int64) error {
	return r.rec("Completed", "", nowNs, arrivalNs, firstTokenNs, reqOutput, outputTokens)
}
func (r *Recorder) Failed(nowNs, arrivalNs, firstTokenNs int64) error {
	return r.rec("Failed", "", nowNs, arrivalNs, firstTokenNs)
}
func (r *Recorder) Expired(nowNs, arrivalNs, firstTokenNs int64) error {
	return r.rec("Expired", "", nowNs, arrivalNs, firstTokenNs)
}
