package cluster

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/narwhal-io/narwhal/core/controller"
	"github.com/narwhal-io/narwhal/k8s/podmeta"
)

// idleCore never decides: the test watches what a term does besides steps.
type idleCore struct{ *controller.Controller }

func (idleCore) Step(int64) controller.Decision { return controller.Decision{} }

// A leader killed in the middle of a move (OOM, node loss) leaves its
// engine pod marked draining: not live on any replica, and its saved
// state names the move's target role while the pod's label still says
// the source. The next leader clears such a mark once every move an
// earlier leader could still be running has ended, so the engine serves
// again in the role its label says.
func TestNewLeaderClearsDrainMarkOfCrashedLeader(t *testing.T) {
	left := enginePod("p0", "prefill")
	ctx, cs, ctl := leadAfterCrash(t, left)
	waitFor(t, "the stale drain mark to be cleared", func() bool {
		p, err := cs.CoreV1().Pods("llm").Get(ctx, "p0", metav1.GetOptions{})
		return err == nil && p.Annotations[podmeta.AnnotationDraining] == ""
	})
	waitFor(t, "p0 to serve as prefill again", func() bool {
		for _, e := range ctl.Engines() {
			if e.ID == "p0" {
				return e.Live && e.Role == controller.RolePrefill && e.State == controller.StateServing
			}
		}
		return false
	})
	if got := ctl.Roles().RoleOf("p0"); got != controller.RolePrefill {
		t.Fatalf("role table: p0 is %v; want prefill", got)
	}
	if r := roles(t, cs); r["p0"] != "prefill" || r["d0"] != "decode" {
		t.Fatalf("pod roles %v", r)
	}
}

// A leader that aborted a move on its way out (its actuator removed the
// draining mark) or died before relabelling left a state that names the
// move's target role, and a pod whose label says the source, with no pod
// event to come. The next leader takes the role from the pod, in its
// engine table, its role table and the state it saves.
func TestNewLeaderTakesRolesFromPods(t *testing.T) {
	self := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "narwhal", Name: "core-0"}}
	saved, err := json.Marshal(controller.PersistedState{Version: 1, Seq: 3, LastMoveNs: 1,
		Engines: []controller.PersistedEngine{{ID: "d0", Role: controller.RoleDecode}, {ID: "p0", Role: controller.RoleDecode, LastMoveNs: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	state := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "narwhal", Name: "narwhal-core-state"},
		Data: map[string]string{"controller-state.json": string(saved)}}
	cs := fake.NewSimpleClientset(self, state, enginePod("p0", "prefill"), enginePod("d0", "decode"))
	ctx := context.Background()
	k, ctl := runReplica(t, cs, testConfig(), controller.DefaultConfig(), false)
	waitFor(t, "two steps", func() bool { return k.Steps() >= 2 })
	if p, d := ctl.Roles().RoleOf("p0"), ctl.Roles().RoleOf("d0"); p != controller.RolePrefill || d != controller.RoleDecode {
		t.Fatalf("role table p0 %v d0 %v; want the pods' prefill and decode", p, d)
	}
	cm, err := cs.CoreV1().ConfigMaps("narwhal").Get(ctx, "narwhal-core-state", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var st controller.PersistedState
	if err := json.Unmarshal([]byte(cm.Data["controller-state.json"]), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Engines) != 2 || st.Engines[1].ID != "p0" || st.Engines[1].Role != controller.RolePrefill || st.Engines[1].LastMoveNs != 1 || st.LastMoveNs != 1 {
		t.Fatalf("saved state %+v; want p0 prefill, its last move and the cooldown kept", st)
	}
}

// A replica that crashed while leading and restarted in the same pod
// finds narwhal.io/leader=true still on its pod; while another replica
// holds the Lease it must not keep the label (the leader Service would
// select two pods).
func TestRestartedReplicaDropsStaleLeaderLabel(t *testing.T) {
	self := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "narwhal", Name: "core-0",
		Labels: map[string]string{LabelLeader: "true", "app": "narwhal-core"}}}
	holder, dur := "core-1", int32(3600)
	now := metav1.NewMicroTime(time.Now())
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "narwhal", Name: testConfig().LeaseName},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &dur, AcquireTime: &now, RenewTime: &now}}
	cs := fake.NewSimpleClientset(self, lease, enginePod("p0", "prefill"), enginePod("d0", "decode"))
	ctx := context.Background()
	k, _ := runReplica(t, cs, testConfig(), controller.DefaultConfig(), false)
	waitFor(t, "the stale leader label to be removed", func() bool {
		p, err := cs.CoreV1().Pods("narwhal").Get(ctx, "core-0", metav1.GetOptions{})
		_, labelled := p.Labels[LabelLeader]
		return err == nil && !labelled
	})
	if k.IsLeader() {
		t.Fatal("the replica leads although core-1 holds the Lease")
	}
	p, _ := cs.CoreV1().Pods("narwhal").Get(ctx, "core-0", metav1.GetOptions{})
	if p.Labels["app"] != "narwhal-core" {
		t.Fatalf("labels %v: the other labels must stay", p.Labels)
	}
}

// leadAfterCrash runs a replica that finds left (the engine p0) marked
// draining by a crashed leader whose saved state put p0 in decode, with
// d0 serving decode; the replica leads until the test ends.
func leadAfterCrash(t *testing.T, left *corev1.Pod) (context.Context, *fake.Clientset, *controller.Controller) {
	t.Helper()
	left.UID = "uid-p0"
	left.Annotations[podmeta.AnnotationDraining] = "true"
	self := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "narwhal", Name: "core-0"}}
	// The crashed leader saved p0 in the move's target role.
	saved, err := json.Marshal(controller.PersistedState{Version: 1, Seq: 3,
		Engines: []controller.PersistedEngine{{ID: "d0", Role: controller.RoleDecode}, {ID: "p0", Role: controller.RoleDecode}}})
	if err != nil {
		t.Fatal(err)
	}
	state := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "narwhal", Name: "narwhal-core-state"},
		Data: map[string]string{"controller-state.json": string(saved)}}
	cs := fake.NewSimpleClientset(self, state, left, enginePod("d0", "decode"))
	cfg := testConfig()
	cfg.DrainTimeoutS, cfg.SwitchTimeoutS = 0.2, 0.1
	k, ctl := runReplica(t, cs, cfg, controller.DefaultConfig(), false)
	waitFor(t, "leadership", k.IsLeader)
	return context.Background(), cs, ctl
}

// A crashed leader may have switched p0's engine to decode through its
// role-switch endpoint before it could relabel the pod: before clearing
// the mark, the next leader asks the engine to hold its label's role.
func TestNewLeaderSwitchesStaleEngineToItsLabel(t *testing.T) {
	var mu sync.Mutex
	var calls []string
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		var b struct{ Role, From string }
		_ = json.NewDecoder(r.Body).Decode(&b)
		mu.Lock()
		calls = append(calls, b.From+"->"+b.Role)
		mu.Unlock()
	}))
	defer srv.Close()
	left := enginePod("p0", "prefill")
	left.Annotations[podmeta.AnnotationRoleSwitchURL] = srv.URL
	ctx, cs, _ := leadAfterCrash(t, left)
	waitFor(t, "the stale drain mark to be cleared", func() bool {
		p, err := cs.CoreV1().Pods("llm").Get(ctx, "p0", metav1.GetOptions{})
		return err == nil && p.Annotations[podmeta.AnnotationDraining] == ""
	})
	mu.Lock()
	defer mu.Unlock()
	if len(calls) != 1 || calls[0] != "decode->prefill" {
		t.Fatalf("switch calls %v; want one, decode->prefill (the label's role)", calls)
	}
}
