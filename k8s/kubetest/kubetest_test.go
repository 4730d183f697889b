package kubetest

import (
	"context"
	"os"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestControlPlane: the API server starts with token authentication and
// RBAC: the admin token works, a wrong token is refused (401), and a
// fresh ServiceAccount's token authenticates but is allowed nothing (403).
func TestControlPlane(t *testing.T) {
	if _, err := binary("kube-apiserver"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := Start(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	ns := s.Namespace(t)
	if _, err := s.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("admin: %v", err)
	}
	bad, _ := kubernetes.NewForConfig(s.ConfigFor("wrong"))
	if _, err := bad.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsUnauthorized(err) {
		t.Fatalf("wrong token: %v; want 401", err)
	}
	tok, err := s.ServiceAccountToken(ctx, ns, "nobody")
	if err != nil {
		t.Fatal(err)
	}
	sa, _ := kubernetes.NewForConfig(s.ConfigFor(tok))
	if _, err := sa.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("service account without a role: %v; want 403 (RBAC on)", err)
	}
}
