package actuate

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ownerSelectsRole follows the pod's owner references (ReplicaSet and its
// Deployment, StatefulSet) and returns an ErrOwnerSelectsRole error when
// an owner's selector uses the role label key: relabelling the pod would
// take it out of its owner's selection, and the owner would start a
// replacement while the relabelled pod lives on as an orphan. Other owner
// kinds are not checked (logged).
func (a *Actuator) ownerSelectsRole(ctx context.Context, pod *corev1.Pod) error {
	key := a.cfg.Roles.Key
	apps := a.client.AppsV1()
	for _, ref := range pod.OwnerReferences {
		var sel *metav1.LabelSelector
		kind, name := ref.Kind, ref.Name
		switch ref.Kind {
		case "ReplicaSet":
			rs, err := apps.ReplicaSets(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("actuate: get owner ReplicaSet %s/%s: %w", pod.Namespace, ref.Name, err)
			}
			sel = rs.Spec.Selector
			// A Deployment's ReplicaSets copy its selector: name the
			// Deployment, the object the user edits.
			for _, up := range rs.OwnerReferences {
				if up.Kind != "Deployment" {
					continue
				}
				d, err := apps.Deployments(pod.Namespace).Get(ctx, up.Name, metav1.GetOptions{})
				if err != nil {
					return fmt.Errorf("actuate: get owner Deployment %s/%s: %w", pod.Namespace, up.Name, err)
				}
				if usesKey(d.Spec.Selector, key) || !usesKey(sel, key) {
					sel, kind, name = d.Spec.Selector, "Deployment", up.Name
				}
			}
		case "StatefulSet":
			ss, err := apps.StatefulSets(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("actuate: get owner StatefulSet %s/%s: %w", pod.Namespace, ref.Name, err)
			}
			sel = ss.Spec.Selector
		default:
			a.logger.Debug("owner kind not checked for a role selector", "pod", pod.Namespace+"/"+pod.Name, "kind", ref.Kind, "name", ref.Name)
			continue
		}
		if usesKey(sel, key) {
			return fmt.Errorf("%w: pod %s/%s is owned by %s %s, whose selector %s uses %s; "+
				"relabelling would orphan the pod and start a replacement: use the scale method for this pool, "+
				"or drop %s from the owner's selector",
				ErrOwnerSelectsRole, pod.Namespace, pod.Name, kind, name, metav1.FormatLabelSelector(sel), key, key)
		}
	}
	return nil
}

func usesKey(sel *metav1.LabelSelector, key string) bool {
	if sel == nil {
		return false
	}
	if _, ok := sel.MatchLabels[key]; ok {
		return true
	}
	for _, e := range sel.MatchExpressions {
		if e.Key == key {
			return true
		}
	}
	return false
}
