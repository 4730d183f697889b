package service

import (
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/narwhal-io/narwhal/core/controller"
)

const goodProfiles = `{"profiles": [
  {"model": "acme/house-model-13b", "gpu": "H100", "tp": 1, "source": "house sweep",
   "prefill_points": [{"input_tokens": 512, "seconds": 0.04}, {"input_tokens": 2048, "seconds": 0.15}, {"input_tokens": 8192, "seconds": 0.7}],
   "decode_points": [{"batch": 1, "ctx_tokens": 1024, "seconds": 0.012}, {"batch": 32, "ctx_tokens": 65536, "seconds": 0.02}, {"batch": 128, "ctx_tokens": 131072, "seconds": 0.04}]}
]}`

// profiles.file (also --profiles) is loaded at start: a bad file is a
// configuration error naming file, line and field; a good one prices its
// model (origin measured) where neither the built-ins nor the prior could.
func TestProfilesFileConfig(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "profiles.json")
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(good, []byte(goodProfiles), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte(strings.Replace(goodProfiles, `"seconds": 0.15`, `"seconds": 0`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(k string) (string, bool) {
		switch k {
		case "NARWHAL_AUTH_TOKEN":
			return "tok", true
		case "NARWHAL_AUTH_AGENT_TOKEN":
			return "agent-tok", true
		}
		return "", false
	}
	_, err := Load([]string{"--profiles", bad}, env)
	if err == nil || !strings.Contains(err.Error(), bad+":3: profiles[0].prefill_points[1].seconds") {
		t.Fatalf("bad profiles file: %v", err)
	}
	cfg, err := Load([]string{"--profiles.file", good}, env)
	if err != nil || cfg.Profiles.File != good {
		t.Fatalf("--profiles.file: %v %+v", err, cfg.Profiles)
	}
	cfg, err = Load([]string{"--profiles", good}, env)
	if err != nil || cfg.Profiles.File != good {
		t.Fatalf("--profiles: %v %+v", err, cfg.Profiles)
	}
	c, err := NewCore(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.UpsertEngine(controller.Engine{ID: "h1", Model: "acme/house-model-13b", GPU: "H100", Role: controller.RolePrefill, Live: true}); err != nil {
		t.Fatal(err)
	}
	if u := c.Unprofiled(); len(u) != 0 {
		t.Fatalf("the file's model is unprofiled: %v", u)
	}
	found := false
	for _, p := range c.Controller().Profiles() {
		if p.Model == "acme/house-model-13b" && p.Origin == controller.OriginMeasured && p.Source == "house sweep" {
			found = true
		}
	}
	if !found {
		t.Fatal("the file's profile is not among the controller's")
	}
}

// /readyz names the models without a profile (their engines move on
// observed pressure only); readiness itself does not depend on it.
func TestReadyzNamesUnprofiledModels(t *testing.T) {
	rc := newRealCore(t)
	if err := rc.UpsertEngine(controller.Engine{ID: "u1", Model: "acme/mystery-7b", GPU: "H100", Role: controller.RolePrefill, Live: true}); err != nil {
		t.Fatal(err)
	}
	s := newTestServer(t, testConfig(), rc)
	code, body := get(t, s.Handler(), "/readyz")
	if code != http.StatusOK || !strings.Contains(body, `"unprofiled":"acme/mystery-7b on H100"`) {
		t.Fatalf("/readyz: %d %s", code, body)
	}
}
