package cluster

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
)

// manifests decodes every document of deploy/k8s-*.yaml into typed
// Kubernetes objects (unknown kinds or malformed fields fail).
func manifests(t *testing.T) []runtime.Object {
	t.Helper()
	files, err := filepath.Glob("../../deploy/k8s-*.yaml")
	if err != nil || len(files) < 3 {
		t.Fatalf("deploy/k8s-*.yaml: %v, %v", files, err)
	}
	var objs []runtime.Object
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range bytes.Split(b, []byte("\n---\n")) {
			obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
			if err != nil {
				t.Fatalf("%s document %d: %v", f, i, err)
			}
			objs = append(objs, obj)
		}
	}
	return objs
}

// TestManifestsMatchTheCode: the Deployment passes the pod identity the
// code reads, its core.yaml kubernetes section decodes (known fields
// only) into a valid Config naming the Lease and ConfigMap that the
// manifests create, the leader Service selects the leader label, and the
// Roles grant every verb the code uses.
func TestManifestsMatchTheCode(t *testing.T) {
	var (
		dep      *appsv1.Deployment
		cms      = map[string]*corev1.ConfigMap{}
		services = map[string]*corev1.Service{}
		roles    []*rbacv1.Role
		lease    bool
	)
	for _, o := range manifests(t) {
		switch v := o.(type) {
		case *appsv1.Deployment:
			dep = v
		case *corev1.ConfigMap:
			cms[v.Name] = v
		case *corev1.Service:
			services[v.Name] = v
		case *rbacv1.Role:
			roles = append(roles, v)
		default:
			if o.GetObjectKind().GroupVersionKind().Kind == "Lease" {
				lease = true
			}
		}
	}
	if dep == nil || !lease || len(roles) != 2 {
		t.Fatalf("missing objects: deployment %v, lease %v, roles %d", dep != nil, lease, len(roles))
	}
	env := map[string]string{}
	for _, e := range dep.Spec.Template.Spec.Containers[0].Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			env[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	if env["POD_NAME"] != "metadata.name" || env["POD_NAMESPACE"] != "metadata.namespace" {
		t.Fatalf("deployment env %v: want POD_NAME and POD_NAMESPACE from the downward API", env)
	}
	if dep.Spec.Template.Spec.ServiceAccountName != "narwhal-core" {
		t.Fatalf("service account %q", dep.Spec.Template.Spec.ServiceAccountName)
	}

	var file struct {
		Kubernetes yaml.Node `yaml:"kubernetes"`
	}
	if err := yaml.Unmarshal([]byte(cms["narwhal-core-k8s"].Data["core.yaml"]), &file); err != nil {
		t.Fatal(err)
	}
	// The service's kubernetes section: this Config inline plus the
	// service's own keys (service.KubernetesConfig; its loader is tested
	// in service/kube_test.go).
	sec := struct {
		Enabled    bool    `yaml:"enabled"`
		Config     Config  `yaml:",inline"`
		DemandURL  string  `yaml:"demand_url"`
		ShipEveryS float64 `yaml:"ship_every_s"`
	}{Config: DefaultConfig()}
	var section bytes.Buffer
	enc := yaml.NewEncoder(&section)
	if err := enc.Encode(&file.Kubernetes); err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(&section)
	dec.KnownFields(true)
	if err := dec.Decode(&sec); err != nil {
		t.Fatalf("kubernetes section: %v", err)
	}
	if !sec.Enabled || sec.ShipEveryS <= 0 || !strings.HasPrefix(sec.DemandURL, "http://narwhal-core-leader.narwhal.svc:8080/") {
		t.Fatalf("kubernetes section: enabled %v, ship_every_s %v, demand_url %q; want enabled, shipping to the narwhal-core-leader Service",
			sec.Enabled, sec.ShipEveryS, sec.DemandURL)
	}
	cfg := sec.Config
	podEnv := map[string]string{"POD_NAMESPACE": "narwhal", "POD_NAME": "narwhal-core-abc"}
	cfg = cfg.FromEnv(func(k string) string { return podEnv[k] })
	if err := cfg.Validate(); err != nil {
		t.Fatalf("kubernetes section: %v", err)
	}
	if _, ok := cms[cfg.StateConfigMap]; !ok {
		t.Fatalf("state configmap %q not in the manifests", cfg.StateConfigMap)
	}
	if got := services["narwhal-core-leader"].Spec.Selector[LabelLeader]; got != "true" {
		t.Fatalf("leader service selector %v", services["narwhal-core-leader"].Spec.Selector)
	}

	allowed := func(ns, group, resource, verb, name string) bool {
		for _, r := range roles {
			if r.Namespace != ns {
				continue
			}
			for _, rule := range r.Rules {
				if slices.Contains(rule.APIGroups, group) && slices.Contains(rule.Resources, resource) && slices.Contains(rule.Verbs, verb) &&
					(len(rule.ResourceNames) == 0 || slices.Contains(rule.ResourceNames, name)) {
					return true
				}
			}
		}
		return false
	}
	for _, need := range []string{
		"narwhal coordination.k8s.io leases get " + cfg.LeaseName,
		"narwhal coordination.k8s.io leases create " + cfg.LeaseName,
		"narwhal coordination.k8s.io leases update " + cfg.LeaseName,
		"narwhal  configmaps get " + cfg.StateConfigMap,
		"narwhal  configmaps create " + cfg.StateConfigMap,
		"narwhal  configmaps update " + cfg.StateConfigMap,
		"narwhal  pods patch narwhal-core-abc",
		cfg.EngineNamespace + "  pods list -",
		cfg.EngineNamespace + "  pods watch -",
		cfg.EngineNamespace + "  pods get e0",
		cfg.EngineNamespace + "  pods patch e0",
	} {
		f := strings.Split(need, " ")
		if !allowed(f[0], f[1], f[2], f[3], f[4]) {
			t.Fatalf("RBAC does not allow %q", need)
		}
	}
}
