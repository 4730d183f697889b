package service

import (
	"os/exec"
	"strings"
	"testing"
)

// TestServiceLinksNoKubernetesClient: package service (and so the fuzz
// targets over its config and events) builds without client-go or the
// Kubernetes API types; the cluster side lives in service/kube. Nor gRPC
// and Envoy's API (about 100 packages): the ext_proc server is
// service/extproc's sidecar. With
// client-go in it the fuzz targets' instrumented build on 2 cores took
// 5 min 26 s instead of 1 min 41 s (k8s/clusterconfig's doc).
func TestServiceLinksNoKubernetesClient(t *testing.T) {
	out, err := exec.Command("go", "list", "-test", "-deps", ".", "../fuzz").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	var bad []string
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "k8s.io/client-go") || strings.HasPrefix(p, "k8s.io/api/") ||
			strings.HasPrefix(p, "google.golang.org/grpc") || strings.HasPrefix(p, "github.com/envoyproxy/") {
			bad = append(bad, p)
		}
	}
	if len(bad) > 0 {
		t.Fatalf("service or fuzz links %d Kubernetes client, gRPC or Envoy packages, e.g. %v", len(bad), bad[:min(3, len(bad))])
	}
}
