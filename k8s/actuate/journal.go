package actuate

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/narwhal-io/narwhal/k8s/discover"
)

// MoveRecord is the outcome of one move, in the actuator's journal. The
// controller's journal holds the decision (DecisionSeq); this is what
// happened to it on the cluster.
type MoveRecord struct {
	EngineID    string `json:"engine_id"`
	Pod         string `json:"pod"`
	From        string `json:"from"`
	To          string `json:"to"`
	Method      string `json:"method"`
	DecisionSeq uint64 `json:"decision_seq"`
	StartNs     int64  `json:"start_ns"`
	EndNs       int64  `json:"end_ns"`
	// Result is done, failed or refused (refused: stopped before the
	// pod was touched, see narwhal_k8s_move_refusals_total).
	Result string `json:"result"`
	Error  string `json:"error,omitempty"`
}

// journalCap bounds the actuator's journal.
const journalCap = 256

type journal struct {
	mu   sync.Mutex
	recs []MoveRecord
}

func (j *journal) add(r MoveRecord) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if len(j.recs) == journalCap {
		copy(j.recs, j.recs[1:])
		j.recs = j.recs[:journalCap-1]
	}
	j.recs = append(j.recs, r)
}

// Journal returns the last moves' outcomes (at most 256), oldest first.
func (a *Actuator) Journal() []MoveRecord {
	a.journal.mu.Lock()
	defer a.journal.mu.Unlock()
	return append([]MoveRecord(nil), a.journal.recs...)
}

// refusalReason names a refusal ("" for other errors).
func refusalReason(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrOwnerSelectsRole):
		return "owner_selects_role"
	case errors.Is(err, ErrWrongWorkload):
		return "wrong_workload"
	case errors.Is(err, ErrNoSwitchURL):
		return "no_switch_url"
	case errors.Is(err, ErrRoleMismatch):
		return "role_mismatch"
	}
	return ""
}

// event records a Kubernetes Event on the pod, so `kubectl describe pod`
// shows the move (best effort: logged on failure).
func (a *Actuator) event(ref discover.PodRef, typ, reason, msg string) {
	ctx, cancel := context.WithTimeout(context.Background(), a.cfg.SwitchTimeout)
	defer cancel()
	now := metav1.NewTime(time.Unix(0, a.now()))
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: ref.Name + ".narwhal.", Namespace: ref.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: ref.Namespace, Name: ref.Name},
		Reason:         reason, Message: msg, Type: typ,
		Source:         corev1.EventSource{Component: "narwhal-core"},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	if _, err := a.client.CoreV1().Events(ref.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		a.logger.Warn("could not record event", "pod", ref.Namespace+"/"+ref.Name, "reason", reason, "err", fmt.Sprint(err))
	}
}
