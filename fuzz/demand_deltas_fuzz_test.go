package fuzz

import (
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/narwhal-io/narwhal/core/buckets"
	"github.com/narwhal-io/narwhal/k8s/demandmerge"
)

// FuzzDemandDeltas posts arbitrary bodies, as routers do, to the leader's
// merged demand store (POST /v1/demand/deltas): no panic, 204 or 400 or
// 413, and a refused body changes nothing (the store's views read the
// same before and after); what the store then holds reads back with
// counts never negative.
func FuzzDemandDeltas(f *testing.F) {
	const width, window = int64(1e9), int64(60e9)
	now := fuzzBase
	f.Add([]byte(`{"router":"r1","epoch":1,"seq":1,"width_ns":1000000000,"attainment_width_ns":10000000000,"demand":[{"kind":0,"start_ns":1795000000000000000,"cells":[[100,10,3]],"overflow":{"count":1,"max_input":9000,"max_output":0}}],"attainment":[{"start_ns":1795000000000000000}]}`))
	f.Add([]byte(`{"router":"r1","epoch":1,"seq":2,"width_ns":1000000000,"demand":[{"kind":7,"start_ns":-1,"cells":[[-1,10,3]]}]}`))
	f.Add([]byte(`{"router":"r2","epoch":1,"seq":1,"width_ns":1000000000,"demand":[{"kind":0,"start_ns":1795000600000000000,"cells":[[1,1,1]]}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		s, err := demandmerge.New(demandmerge.Config{
			Demand:               buckets.DemandConfig{BucketWidthNs: width, DemandWindowNs: window},
			AttainmentIntervalNs: 10e9, AttainmentRetentionNs: 4 * window,
			NowNs: func() int64 { return now }, FutureToleranceNs: 30e9})
		if err != nil {
			t.Fatal(err)
		}
		h := demandmerge.Handler(s, 1<<16, nil, slog.New(slog.DiscardHandler))
		read := func() (int64, int64) {
			var n int64
			for k := range buckets.NumKinds {
				_, w := s.History(buckets.Kind(k)).Window(0, math.MaxInt64, nil)
				if c := w.Count(); c < 0 {
					t.Fatalf("kind %d: count %d", k, c)
				} else {
					n += c
				}
			}
			return n, s.Stats().Applied
		}
		before, _ := read()
		req := httptest.NewRequest(http.MethodPost, "/v1/demand/deltas", strings.NewReader(string(body)))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		after, applied := read()
		if testing.Verbose() {
			t.Logf("%d %s applied %d obs %d", rec.Code, rec.Body.String(), applied, after)
		}
		switch rec.Code {
		case http.StatusNoContent:
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			if after != before || applied != 0 {
				t.Fatalf("refused (%d %s) but the store changed: %d -> %d observations, %d applied", rec.Code, rec.Body.String(), before, after, applied)
			}
		default:
			t.Fatalf("status %d (%s)", rec.Code, rec.Body.String())
		}
	})
}
