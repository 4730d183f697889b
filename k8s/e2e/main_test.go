package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/narwhal-io/narwhal/k8s/kubetest"
)

func TestMain(m *testing.M) {
	os.Exit(kubetest.Main(m, kubetest.Options{ControllerManager: true}))
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// readyStatus is what a kubelet reports for a started pod.
func readyStatus(ip string, readySince time.Time) corev1.PodStatus {
	return corev1.PodStatus{
		Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(readySince)},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(readySince)},
		},
	}
}

// setReady sets the pod's status through the status subresource.
func setReady(ctx context.Context, c kubernetes.Interface, ns, name, ip string, since time.Time) error {
	p, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	p.Status = readyStatus(ip, since)
	_, err = c.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	return err
}

// enginePod is a pod bound to node with labels and annotations.
func enginePod(name, node string, labels, ann map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: ann},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{
			Name: "engine", Image: "vllm/vllm-openai:v0.11.0",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8000}},
		}}},
	}
}

// createRunning creates pods and reports them Running and Ready.
func createRunning(t *testing.T, c kubernetes.Interface, ns string, pods ...*corev1.Pod) {
	t.Helper()
	ctx := context.Background()
	for i, p := range pods {
		if _, err := c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create pod %s: %v", p.Name, err)
		}
		if err := setReady(ctx, c, ns, p.Name, fmt.Sprintf("10.1.0.%d", i+10), time.Now()); err != nil {
			t.Fatalf("status of pod %s: %v", p.Name, err)
		}
	}
}

// kubelet plays the kubelet for the pods the ReplicaSet controller makes
// in ns: a new pod becomes Running and Ready with an IP (readySince gives
// a chosen pod an older ready time), and a deleted pod is finished
// (force-deleted), as a kubelet does after its containers stop.
type kubelet struct {
	mu         sync.Mutex
	readySince map[string]time.Time
	stop       context.CancelFunc
	done       chan struct{}
}

func startKubelet(t *testing.T, c kubernetes.Interface, ns string) *kubelet {
	ctx, cancel := context.WithCancel(context.Background())
	k := &kubelet{readySince: map[string]time.Time{}, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(k.done)
		n := 0
		for ctx.Err() == nil {
			pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			if err == nil {
				for _, p := range pods.Items {
					switch {
					case p.DeletionTimestamp != nil:
						zero := int64(0)
						err := c.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
						if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
							t.Logf("kubelet: delete %s: %v", p.Name, err)
						}
					case p.Status.Phase != corev1.PodRunning:
						n++
						k.mu.Lock()
						since, ok := k.readySince[p.Name]
						k.mu.Unlock()
						if !ok {
							since = time.Now()
						}
						p.Status = readyStatus(fmt.Sprintf("10.2.%d.%d", n/250, n%250+1), since)
						if _, err := c.CoreV1().Pods(ns).UpdateStatus(ctx, &p, metav1.UpdateOptions{}); err != nil && ctx.Err() == nil && !apierrors.IsConflict(err) {
							t.Logf("kubelet: status %s: %v", p.Name, err)
						}
					}
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-k.done })
	return k
}
