package actuate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/narwhal-io/narwhal/core/controller"
	"github.com/narwhal-io/narwhal/k8s/discover"
	"github.com/narwhal-io/narwhal/k8s/podmeta"
)

// AnnotationDeletionCost is the ReplicaSet controller's hint: on a scale
// down it deletes the pods with the lowest cost first.
const AnnotationDeletionCost = "controller.kubernetes.io/pod-deletion-cost"

// deletionCostDrained is the cost given to the drained pod: the lowest an
// int32 cost can be, so the scale down removes it and no other.
var deletionCostDrained = strconv.Itoa(math.MinInt32)

// workloadOf returns the pod's controlling Deployment (through its
// ReplicaSet) or StatefulSet.
func (a *Actuator) workloadOf(ctx context.Context, pod *corev1.Pod) (Workload, error) {
	ref := metav1.GetControllerOf(pod)
	if ref == nil {
		return Workload{}, fmt.Errorf("%w: pod %s/%s has no controller", ErrWrongWorkload, pod.Namespace, pod.Name)
	}
	switch ref.Kind {
	case "StatefulSet":
		return Workload{Kind: "StatefulSet", Name: ref.Name}, nil
	case "ReplicaSet":
		rs, err := a.client.AppsV1().ReplicaSets(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return Workload{}, fmt.Errorf("actuate: get ReplicaSet %s/%s: %w", pod.Namespace, ref.Name, err)
		}
		if up := metav1.GetControllerOf(rs); up != nil && up.Kind == "Deployment" {
			return Workload{Kind: "Deployment", Name: up.Name}, nil
		}
	}
	return Workload{}, fmt.Errorf("%w: pod %s/%s is controlled by %s %s, not a Deployment or StatefulSet",
		ErrWrongWorkload, pod.Namespace, pod.Name, ref.Kind, ref.Name)
}

func (a *Actuator) getScale(ctx context.Context, ns string, w Workload) (*autoscalingv1.Scale, error) {
	if w.Kind == "StatefulSet" {
		return a.client.AppsV1().StatefulSets(ns).GetScale(ctx, w.Name, metav1.GetOptions{})
	}
	return a.client.AppsV1().Deployments(ns).GetScale(ctx, w.Name, metav1.GetOptions{})
}

// addReplicas changes w's replicas by delta through the scale
// subresource (optimistic concurrency: a conflict re-reads and retries)
// and returns the new count.
func (a *Actuator) addReplicas(ctx context.Context, ns string, w Workload, delta int32) (int32, error) {
	var want int32
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		sc, err := a.getScale(ctx, ns, w)
		if err != nil {
			return err
		}
		want = sc.Spec.Replicas + delta
		if want < 0 {
			return fmt.Errorf("%s has %d replicas", w, sc.Spec.Replicas)
		}
		sc.Spec.Replicas = want
		if w.Kind == "StatefulSet" {
			_, err = a.client.AppsV1().StatefulSets(ns).UpdateScale(ctx, w.Name, sc, metav1.UpdateOptions{})
		} else {
			_, err = a.client.AppsV1().Deployments(ns).UpdateScale(ctx, w.Name, sc, metav1.UpdateOptions{})
		}
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("actuate: scale %s/%s by %+d: %w", ns, w, delta, err)
	}
	return want, nil
}

// readyReplicas returns w's ready replicas once its controller has seen
// its latest spec (-1 before).
func (a *Actuator) readyReplicas(ctx context.Context, ns string, w Workload) (int32, error) {
	if w.Kind == "StatefulSet" {
		s, err := a.client.AppsV1().StatefulSets(ns).Get(ctx, w.Name, metav1.GetOptions{})
		if err != nil {
			return 0, err
		}
		if s.Status.ObservedGeneration < s.Generation {
			return -1, nil
		}
		return s.Status.ReadyReplicas, nil
	}
	d, err := a.client.AppsV1().Deployments(ns).Get(ctx, w.Name, metav1.GetOptions{})
	if err != nil {
		return 0, err
	}
	if d.Status.ObservedGeneration < d.Generation {
		return -1, nil
	}
	return d.Status.ReadyReplicas, nil
}

// scaleMove carries out a MethodScale move (see the package doc).
func (a *Actuator) scaleMove(ctx context.Context, m controller.Move, ref discover.PodRef, pod *corev1.Pod, pool *Pool) error {
	src, _ := pool.workload(m.From) // validated in New
	dst, _ := pool.workload(m.To)
	owner, err := a.workloadOf(ctx, pod)
	if err != nil {
		return a.wrapCtx(err)
	}
	if owner != src {
		return fmt.Errorf("%w: pod %s/%s belongs to %s, pool %q moves %s engines out of %s",
			ErrWrongWorkload, ref.Namespace, ref.Name, owner, pool.Name, m.From, src)
	}
	if src.Kind == "StatefulSet" {
		// A StatefulSet scales down by its highest ordinal, whatever the
		// deletion cost says.
		sc, err := a.getScale(ctx, ref.Namespace, src)
		if err != nil {
			return a.wrapCtx(fmt.Errorf("actuate: %w", err))
		}
		if top := src.Name + "-" + strconv.Itoa(int(sc.Spec.Replicas)-1); ref.Name != top {
			return fmt.Errorf("%w: pod %s/%s is not %s's highest ordinal (%s): a scale down would remove %s",
				ErrWrongWorkload, ref.Namespace, ref.Name, src, top, top)
		}
	}
	if err := a.patch(ctx, ref, nil, map[string]any{podmeta.AnnotationDraining: "true"}); err != nil {
		return a.wrapCtx(fmt.Errorf("actuate: mark draining: %w", err))
	}
	undo := func(err error) error {
		uctx, cancel := context.WithTimeout(context.Background(), a.cfg.SwitchTimeout)
		defer cancel()
		if uerr := a.patch(uctx, ref, nil, map[string]any{podmeta.AnnotationDraining: nil, AnnotationDeletionCost: nil}); uerr != nil {
			a.logger.Error("could not clear draining annotation", "pod", ref.Namespace+"/"+ref.Name, "err", uerr)
		}
		return a.wrapCtx(err)
	}
	if err := a.waitDrained(ctx, m.EngineID); err != nil {
		if !errors.Is(err, ErrDrainTimeout) || !a.cfg.SwitchOnDrainTimeout {
			return undo(err)
		}
		a.logger.Warn("drain timed out; switching anyway", "engine", m.EngineID)
	}
	if err := a.patch(ctx, ref, nil, map[string]any{AnnotationDeletionCost: deletionCostDrained}); err != nil {
		return undo(fmt.Errorf("actuate: set %s: %w", AnnotationDeletionCost, err))
	}
	if _, err := a.addReplicas(ctx, ref.Namespace, src, -1); err != nil {
		return undo(err)
	}
	want, err := a.addReplicas(ctx, ref.Namespace, dst, +1)
	if err != nil {
		// Give the source its replica back; its drained pod is on the
		// way out, the replacement comes up in the old role.
		rctx, cancel := context.WithTimeout(context.Background(), a.cfg.SwitchTimeout)
		defer cancel()
		if _, rerr := a.addReplicas(rctx, ref.Namespace, src, +1); rerr != nil {
			a.logger.Error("could not restore source replicas", "workload", src.String(), "err", rerr)
		}
		return a.wrapCtx(err)
	}
	// The switch time is the engine's start time: wait for the drained
	// pod to go and the target workload to have its new replica Ready.
	wctx, cancel := context.WithTimeout(ctx, pool.ReadyTimeout)
	defer cancel()
	tick := time.NewTicker(a.cfg.DrainPoll)
	defer tick.Stop()
	gone := false
	for {
		if !gone {
			p, err := a.client.CoreV1().Pods(ref.Namespace).Get(wctx, ref.Name, metav1.GetOptions{})
			gone = apierrors.IsNotFound(err) || (err == nil && (p.DeletionTimestamp != nil || p.UID != pod.UID))
		}
		if gone {
			n, err := a.readyReplicas(wctx, ref.Namespace, dst)
			if err == nil && n >= want {
				return nil
			}
		}
		select {
		case <-wctx.Done():
			if a.ctx.Err() != nil {
				return fmt.Errorf("%w: waiting for %s", ErrClosed, dst)
			}
			return fmt.Errorf("%w: after %v: drained pod gone %v, %s not at %d ready replicas",
				ErrNotReady, pool.ReadyTimeout, gone, dst, want)
		case <-tick.C:
		}
	}
}
