package controller

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func within(got, want, rel float64) bool { return math.Abs(got-want) <= rel*want }

// The built-in fits reproduce the published numbers (REFERENCES.md).
func TestBuiltinProfilesMatchSources(t *testing.T) {
	ps := BuiltinProfiles()
	f := func(model, gpu string, prefill map[int64]float64, decode [][3]float64, rel float64) {
		t.Helper()
		i, ok := ps.Lookup(model, gpu)
		if !ok {
			t.Fatalf("no profile for %s on %s", model, gpu)
		}
		p := ps.Profiles[i]
		if p.Source == "" {
			t.Fatalf("profile %s on %s names no source", model, gpu)
		}
		for l, ms := range prefill {
			if got := p.Prefill.Seconds(float64(l)) * 1000; !within(got, ms, rel) {
				t.Fatalf("%s on %s: prefill %d tokens; got %.1f ms; want %.1f ms ±%.0f%%", model, gpu, l, got, ms, rel*100)
			}
		}
		for _, d := range decode { // batch, ctx per seq, ms
			if got := p.Decode.StepSeconds(d[0], d[0]*d[1]) * 1000; !within(got, d[2], rel) {
				t.Fatalf("%s on %s: decode batch %v ctx %v; got %.1f ms; want %.1f ms ±%.0f%%", model, gpu, d[0], d[1], got, d[2], rel*100)
			}
		}
	}
	f("facebook/opt-13b", "A100-80G", map[int64]float64{512: 72, 1024: 130, 2048: 257}, [][3]float64{{1, 1024, 20.6}, {32, 1024, 41.7}, {128, 1024, 103}}, 0.12)
	f("llama2-70b", "H100", map[int64]float64{1024: 78, 2048: 137, 8192: 845}, [][3]float64{{1, 576, 30.6}, {32, 576, 38.6}, {64, 576, 50.2}}, 0.25)
	f("meta-llama/Llama-2-70b-hf", "a100-80gb", map[int64]float64{1024: 155, 2048: 274, 8192: 1550}, [][3]float64{{1, 576, 45.0}, {32, 576, 53.0}, {64, 576, 71.6}}, 0.25)
	if _, ok := ps.Lookup("facebook/opt-13b", "H100"); ok {
		t.Fatalf("OPT-13B has no H100 profile")
	}
}

func TestFitPrefillExact(t *testing.T) {
	pts := []PrefillPoint{}
	for _, l := range []int64{100, 200, 400, 800} {
		x := float64(l)
		pts = append(pts, PrefillPoint{InputTokens: l, Seconds: 0.01 + 1e-4*x + 2e-8*x*x})
	}
	f, err := FitPrefill(pts)
	if err != nil {
		t.Fatal(err)
	}
	if !within(f.A, 0.01, 1e-6) || !within(f.B, 1e-4, 1e-6) || !within(f.C, 2e-8, 1e-5) || f.MinInput != 100 || f.MaxInput != 800 {
		t.Fatalf("unexpected fit %+v", f)
	}
	if _, err := FitPrefill(pts[:2]); !errors.Is(err, ErrInvalidProfile) {
		t.Fatalf("two points must be refused; got %v", err)
	}
	if _, err := FitPrefill([]PrefillPoint{{1, 1}, {1, 1}, {2, math.NaN()}}); !errors.Is(err, ErrInvalidProfile) {
		t.Fatalf("NaN must be refused; got %v", err)
	}
}

func TestLoadProfiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "p.json")
	js := `{"profiles":[{"model":"m","gpu":"G1","tp":1,"source":"test",
	"prefill_points":[{"input_tokens":100,"seconds":0.02},{"input_tokens":200,"seconds":0.03},{"input_tokens":400,"seconds":0.05}],
	"decode_points":[{"batch":1,"ctx_tokens":100,"seconds":0.01},{"batch":2,"ctx_tokens":400,"seconds":0.012},{"batch":8,"ctx_tokens":800,"seconds":0.02},{"batch":4,"ctx_tokens":4000,"seconds":0.03}]}]}`
	if err := os.WriteFile(path, []byte(js), 0o644); err != nil {
		t.Fatal(err)
	}
	ps, err := LoadProfiles(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := ps.Profiles[0].Prefill.Seconds(300); !within(got, 0.04, 1e-6) {
		t.Fatalf("unexpected prefill at 300; got %v; want 0.04", got)
	}
	if ps.Profiles[0].Decode.MaxBatch != 8 || ps.Profiles[0].Decode.MaxCtxPerSeq != 1000 {
		t.Fatalf("unexpected decode coverage %+v", ps.Profiles[0].Decode)
	}
	os.WriteFile(path, []byte(`{"profiles":[{"model":"m","gpu":"g","prefill_points":[{"input_tokens":-1,"seconds":1}]}]}`), 0o644)
	if _, err := LoadProfiles(path); !errors.Is(err, ErrInvalidProfile) || !strings.Contains(err.Error(), "entry 0") {
		t.Fatalf("bad file must be refused naming the entry; got %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	c := DefaultConfig()
	c.CooldownS = -1
	err := c.Validate()
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "controller.cooldown_s must be >= 0, got -1") {
		t.Fatalf("unexpected error %v", err)
	}
	c = DefaultConfig()
	c.KVHeadroom = math.NaN()
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "kv_headroom") {
		t.Fatalf("NaN kv_headroom must be refused; got %v", err)
	}
	for _, v := range []float64{-1, math.NaN(), math.Inf(1)} {
		c = DefaultConfig()
		c.PredictionArrivals = v
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "controller.prediction_arrivals must be >= 0") {
			t.Fatalf("prediction_arrivals %v must be refused; got %v", v, err)
		}
	}
	// Settings 0 turns off: out-of-range values are refused with the
	// field and its range named, 0 is accepted.
	for _, f := range []struct {
		name string
		set  func(*Config, float64)
		bad  []float64
		msg  string
	}{
		{"kv_lead_s", func(c *Config, v float64) { c.KVLeadS = v }, []float64{-1, math.NaN(), 3601}, "controller.kv_lead_s must be in [0, 3600]"},
		{"starvation_s", func(c *Config, v float64) { c.StarvationS = v }, []float64{-1, math.NaN(), math.Inf(1), 86401}, "controller.starvation_s must be in [0, 86400]"},
	} {
		for _, v := range f.bad {
			c = DefaultConfig()
			f.set(&c, v)
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), f.msg) {
				t.Fatalf("%s %v must be refused; got %v", f.name, v, err)
			}
		}
		c = DefaultConfig()
		f.set(&c, 0)
		if err := c.Validate(); err != nil {
			t.Fatalf("%s 0 (off) must be accepted; got %v", f.name, err)
		}
	}
}

func TestRoleTableReadAllocs(t *testing.T) {
	c := newTestController(t, testConfig(), 2, 2)
	var r Role
	n := testing.AllocsPerRun(1000, func() {
		tb := c.Roles()
		r = tb.RoleOf(tb.Decode[0])
		_ = tb.Known("e000")
	})
	if n != 0 || r != RoleDecode {
		t.Fatalf("role table read: %v allocs, role %v; want 0, decode", n, r)
	}
	if c.Roles().RoleOf("nope") != RoleNone || (*RoleTable)(nil).RoleOf("x") != RoleNone {
		t.Fatal("unknown engines must read as RoleNone")
	}
	// Not live: no role.
	if err := c.UpdateEngine("e000", t0, Resident{}, 0, false); err != nil {
		t.Fatal(err)
	}
	if tb := c.Roles(); tb.RoleOf("e000") != RoleNone || !tb.Known("e000") || len(tb.Prefill) != 1 {
		t.Fatalf("a down engine takes no work; got %v", tb.Prefill)
	}
}

// A published table's Replaced channel closes when, and only when, the
// next table is published, and Roles then returns that table; reading
// the channel allocates nothing.
func TestRoleTableReplaced(t *testing.T) {
	c := newTestController(t, testConfig(), 2, 2)
	first := c.Roles()
	ch := first.Replaced()
	if ch == nil || (*RoleTable)(nil).Replaced() != nil {
		t.Fatal("a published table must have a Replaced channel; a nil table none")
	}
	if n := testing.AllocsPerRun(1000, func() { _ = c.Roles().Replaced() }); n != 0 {
		t.Fatalf("Replaced: %v allocs, want 0", n)
	}
	select {
	case <-ch:
		t.Fatal("Replaced closed before any newer table")
	default:
	}
	if err := c.UpdateEngine("e000", t0, Resident{}, 0, false); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	default:
		t.Fatal("Replaced still open after a new table was published")
	}
	second := c.Roles()
	if second == first || second.Version <= first.Version || second.RoleOf("e000") != RoleNone {
		t.Fatalf("after the close Roles must return the newer table: version %d -> %d", first.Version, second.Version)
	}
	select {
	case <-second.Replaced():
		t.Fatal("the newest table's Replaced is closed")
	default:
	}
}

func TestJournalSinkAndRing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	sink, err := NewJSONLinesSink(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.JournalRing = 4
	c := newTestController(t, cfg, 2, 2, WithSink(sink))
	for i := 0; i < 6; i++ {
		c.Step(t0+int64(i)*sec, Inputs{})
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	ds, err := LoadJournal(path, 0)
	if err != nil || len(ds) != 6 || ds[5].Seq != 6 || ds[0].Basis != BasisOfferedDemand {
		t.Fatalf("unexpected journal %v %v", len(ds), err)
	}
	ring := c.Decisions(0, 0)
	if len(ring) != 4 || ring[0].Seq != 3 || ring[3].Seq != 6 {
		t.Fatalf("unexpected ring %v", len(ring))
	}
	if got := c.Decisions(4, 1); len(got) != 1 || got[0].Seq != 5 {
		t.Fatalf("unexpected since/limit answer %v", got)
	}
	c2, err := New(cfg, testTiming(), nil, WithHistory(ds))
	if err != nil {
		t.Fatal(err)
	}
	if d := c2.Step(t0+10*sec, Inputs{}); d.Seq != 7 {
		t.Fatalf("sequence must continue after the loaded journal; got %d", d.Seq)
	}
}
