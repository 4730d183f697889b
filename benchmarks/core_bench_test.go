package benchmarks

import (
	"testing"

	"github.com/narwhal-io/narwhal/core"
	"github.com/narwhal-io/narwhal/core/controller"
)

// BenchmarkEmbeddedRequest: every lifecycle call of one request through
// the embedded Go API, as a router makes them (offer started, sized,
// tokenized, role-table read, admitted, first token, completed).
func BenchmarkEmbeddedRequest(b *testing.B) {
	c, err := core.New(core.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	for i, r := range []controller.Role{controller.RolePrefill, controller.RoleDecode} {
		if err := c.UpsertEngine(controller.Engine{ID: []string{"p0", "d0"}[i], Model: "facebook/opt-13b", GPU: "A100-80GB", Role: r, Live: true}); err != nil {
			b.Fatal(err)
		}
	}
	now := ctrlNow
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		now += 1000 // 1 µs apart: 1M requests per virtual second
		c.OfferStarted(now)
		if err := c.OfferSized(now, 1000, 256); err != nil {
			b.Fatal(err)
		}
		if err := c.Tokenized(now, 1000, 1024, 256); err != nil {
			b.Fatal(err)
		}
		t := c.Roles()
		if err := c.Admitted(now, t.Prefill[0], 1024, 256); err != nil {
			b.Fatal(err)
		}
		if err := c.FirstToken(now+150e6, now); err != nil {
			b.Fatal(err)
		}
		if err := c.Completed(now+5e9, now, now+150e6, 256, 200); err != nil {
			b.Fatal(err)
		}
	}
}
