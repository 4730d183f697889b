package sim

import (
	"math"
	"sort"

	"github.com/narwhal-io/narwhal/core/controller"
)

// Point is one sample of the time series (for the SVG and callers).
type Point struct {
	TS             float64 `json:"t_s"`             // start of the interval, s from workload start
	PrefillEngines float64 `json:"prefill_engines"` // mean over the interval, serving or draining in prefill
	DecodeEngines  float64 `json:"decode_engines"`  // same for decode
	PrefillDemand  float64 `json:"prefill_demand"`  // offered prefill seconds per second (engines busy if perfectly packed)
	DecodeDemand   float64 `json:"decode_demand"`   // offered KV·s at the TPOT SLO per engine KV capacity per second
	Arrivals       int64   `json:"arrivals"`        // requests arriving in the interval
	Met            int64   `json:"met"`             // of those, met both SLOs
	Attainment     float64 `json:"attainment"`      // Met / Arrivals (1 when none arrived)
}

type stats struct {
	ttftNs, tpotNs int64
	sampleNs       int64
	base           int64
	spanNs         int64
	ticks          int64
	sumP, sumD     int64
	points         []Point
	pointTicks     []int64
	wallNs         int64
	prof           Profile
	ttftSLOS       float64
	tpotSLOS       float64
}

func (st *stats) init(cfg Config, prof Profile, n int, lastArrivalNs int64) {
	st.ttftNs = int64(cfg.TTFTSLOS * 1e9)
	st.tpotNs = int64(cfg.TPOTSLOS * 1e9)
	st.ttftSLOS, st.tpotSLOS = cfg.TTFTSLOS, cfg.TPOTSLOS
	st.sampleNs = int64(cfg.SampleS * 1e9)
	st.base = cfg.StartUnixNs
	st.spanNs = lastArrivalNs
	st.prof = prof
	np := int(lastArrivalNs/st.sampleNs) + 1
	st.points = make([]Point, np)
	st.pointTicks = make([]int64, np)
	for i := range st.points {
		st.points[i].TS = float64(int64(i)*st.sampleNs) / 1e9
	}
}

func (st *stats) point(ts int64) *Point {
	i := int((ts - st.base) / st.sampleNs)
	if i < 0 || i >= len(st.points) {
		return nil
	}
	return &st.points[i]
}

// sample runs every control tick: engines per role.
func (st *stats) sample(s *simulator, now int64) {
	var p, d int64
	for i := range s.eng {
		e := &s.eng[i]
		if e.state == controller.StateSwitching {
			continue
		}
		switch e.role {
		case controller.RolePrefill:
			p++
		case controller.RoleDecode:
			d++
		}
	}
	if now-st.base <= st.spanNs {
		st.ticks++
		st.sumP += p
		st.sumD += d
	}
	if pt := st.point(now); pt != nil {
		i := int((now - st.base) / st.sampleNs)
		pt.PrefillEngines += float64(p)
		pt.DecodeEngines += float64(d)
		st.pointTicks[i]++
	}
}

func (st *stats) arrival(s *simulator, r *reqState) {
	pt := st.point(s.now)
	if pt == nil {
		return
	}
	l := float64(r.InputTokens)
	pt.PrefillDemand += float64(st.prof.PrefillNs(l, l*l)) / 1e9
	kv := float64(r.InputTokens) + float64(r.OutputTokens)/2
	pt.DecodeDemand += kv * float64(r.OutputTokens) * st.tpotSLOS / float64(st.prof.KVCapacityTokens)
	pt.Arrivals++
}

func (st *stats) done(s *simulator, r *reqState) {
	if ttftMet, tpotMet := st.met(r); ttftMet && tpotMet {
		if pt := st.point(st.base + r.ArrivalNs); pt != nil {
			pt.Met++
		}
	}
}

// met judges one request against the SLOs. TPOT is (last − first token) /
// (output − 1); a request with at most one output token meets TPOT.
func (st *stats) met(r *reqState) (ttft, tpot bool) {
	if r.firstNs == 0 {
		return false, false
	}
	ttft = r.firstNs-(st.base+r.ArrivalNs) <= st.ttftNs
	if r.doneNs == 0 || r.expired {
		return ttft, false
	}
	if r.OutputTokens <= 1 {
		return ttft, true
	}
	tpot = float64(r.doneNs-r.firstNs)/float64(r.OutputTokens-1) <= float64(st.tpotNs)
	return ttft, tpot
}

// Result is one simulation's outcome.
type Result struct {
	Policy            string  `json:"policy"`
	BestSplit         *int    `json:"best_split,omitempty"` // static-best: prefill engines of the best split
	Schedule          string  `json:"schedule,omitempty"`   // oracle: the schedule found, for --policy scheduled:<Schedule>
	Engines           int     `json:"engines"`
	Profile           string  `json:"profile"`
	EngineSlowdown    float64 `json:"engine_slowdown,omitempty"`
	ControllerProfile string  `json:"controller_profile,omitempty"`
	// ControllerProfileError: Config.ControllerProfileError when not 1.
	ControllerProfileError float64 `json:"controller_profile_error,omitempty"`
	Calibrate              bool    `json:"calibrate,omitempty"`
	Requests               int     `json:"requests"`
	Completed              int     `json:"completed"`
	SLOAttainment          float64 `json:"slo_attainment"`
	// SLOAttainmentAfterWarmup: attainment of the requests arriving at or
	// after WarmupS (Config.WarmupS > 0).
	WarmupS                  float64 `json:"warmup_s,omitempty"`
	SLOAttainmentAfterWarmup float64 `json:"slo_attainment_after_warmup,omitempty"`
	TTFTAttainment           float64 `json:"ttft_attainment"`
	TPOTAttainment           float64 `json:"tpot_attainment"`
	GoodputRPS               float64 `json:"goodput_rps"`
	Moves                    int     `json:"moves"`
	// Cancelled: requests whose clients gave up before their first
	// token (Config.ClientTimeoutS); they count as missed.
	Cancelled      int     `json:"cancelled,omitempty"`
	ClientTimeoutS float64 `json:"client_timeout_s,omitempty"`
	// Reversals counts moves in the opposite direction of the move before
	// (prefill→decode after decode→prefill or back): oscillation shows here.
	Reversals int `json:"reversals"`
	// QuickReversals: reversals within 60 s of the move they reverse.
	QuickReversals     int           `json:"quick_reversals"`
	MeanPrefillEngines float64       `json:"mean_prefill_engines"`
	MeanDecodeEngines  float64       `json:"mean_decode_engines"`
	TTFTP50S           float64       `json:"ttft_p50_s"`
	TTFTP90S           float64       `json:"ttft_p90_s"`
	TPOTP50S           float64       `json:"tpot_p50_s"`
	TPOTP90S           float64       `json:"tpot_p90_s"`
	TraceSeconds       float64       `json:"trace_seconds"`
	SimSeconds         float64       `json:"sim_seconds"`
	Events             uint64        `json:"events"`
	WallSeconds        float64       `json:"wall_seconds"`
	TTFTSLOS           float64       `json:"ttft_slo_s"`
	TPOTSLOS           float64       `json:"tpot_slo_s"`
	Splits             []Split       `json:"splits,omitempty"`      // static-best: every split tried
	PerTrace           []TraceResult `json:"per_trace,omitempty"`   // concatenated workloads: attainment per trace file
	CoreErrors         int64         `json:"core_errors,omitempty"` // narwhal: facade calls that returned an error
	LastCoreError      string        `json:"last_core_error,omitempty"`
	Series             []Point       `json:"-"`
}

// TraceResult is the attainment of the requests of one trace file of a
// concatenated workload.
type TraceResult struct {
	Trace         int     `json:"trace"`
	Requests      int     `json:"requests"`
	SLOAttainment float64 `json:"slo_attainment"`
}

// Split is one static split's attainment (static-best).
type Split struct {
	Prefill       int     `json:"prefill"`
	SLOAttainment float64 `json:"slo_attainment"`
}

func (s *simulator) result() *Result {
	st := &s.stats
	res := &Result{
		Policy:         s.pol.name(),
		Engines:        len(s.eng),
		Profile:        s.prof.Name,
		EngineSlowdown: s.cfg.EngineSlowdown, ControllerProfile: s.cfg.ControllerProfile, Calibrate: s.cfg.Calibrate,
		Requests:       len(s.reqs),
		ClientTimeoutS: s.cfg.ClientTimeoutS,
		Moves:          s.moves,
		Reversals:      s.reversals,
		QuickReversals: s.quickRevs,
		TraceSeconds:   float64(st.spanNs) / 1e9,
		SimSeconds:     float64(s.now-s.base) / 1e9,
		Events:         s.events,
		WallSeconds:    float64(st.wallNs) / 1e9,
		TTFTSLOS:       st.ttftSLOS,
		TPOTSLOS:       st.tpotSLOS,
	}
	if e := s.cfg.ControllerProfileError; e != 0 && e != 1 {
		res.ControllerProfileError = e
	}
	var both, ttftN, tpotN int
	var warmN, warmBoth int
	warmNs := int64(s.cfg.WarmupS * 1e9)
	ttfts := make([]float64, 0, len(s.reqs))
	tpots := make([]float64, 0, len(s.reqs))
	for i := range s.reqs {
		r := &s.reqs[i]
		if r.doneNs != 0 && !r.expired {
			res.Completed++
		}
		if r.cancelled {
			res.Cancelled++
		}
		a, b := st.met(r)
		if a {
			ttftN++
		}
		if b {
			tpotN++
		}
		if a && b {
			both++
		}
		if s.cfg.WarmupS > 0 && r.ArrivalNs >= warmNs {
			warmN++
			if a && b {
				warmBoth++
			}
		}
		for len(res.PerTrace) <= r.Trace {
			res.PerTrace = append(res.PerTrace, TraceResult{Trace: len(res.PerTrace)})
		}
		pt := &res.PerTrace[r.Trace]
		pt.Requests++
		if a && b {
			pt.SLOAttainment++
		}
		if r.firstNs != 0 {
			ttfts = append(ttfts, float64(r.firstNs-(st.base+r.ArrivalNs))/1e9)
		}
		if r.doneNs != 0 && !r.expired && r.OutputTokens > 1 {
			tpots = append(tpots, float64(r.doneNs-r.firstNs)/float64(r.OutputTokens-1)/1e9)
		}
	}
	for i := range res.PerTrace {
		if res.PerTrace[i].Requests > 0 {
			res.PerTrace[i].SLOAttainment /= float64(res.PerTrace[i].Requests)
		}
	}
	if len(res.PerTrace) < 2 {
		res.PerTrace = nil
	}
	n := float64(max(len(s.reqs), 1))
	res.SLOAttainment = float64(both) / n
	if s.cfg.WarmupS > 0 {
		res.WarmupS = s.cfg.WarmupS
		res.SLOAttainmentAfterWarmup = float64(warmBoth) / float64(max(warmN, 1))
	}
	res.TTFTAttainment = float64(ttftN) / n
	res.TPOTAttainment = float64(tpotN) / n
	res.GoodputRPS = float64(both) / math.Max(res.TraceSeconds, 1)
	if st.ticks > 0 {
		res.MeanPrefillEngines = float64(st.sumP) / float64(st.ticks)
		res.MeanDecodeEngines = float64(st.sumD) / float64(st.ticks)
	}
	res.TTFTP50S, res.TTFTP90S = quantile(ttfts, 0.5), quantile(ttfts, 0.9)
	res.TPOTP50S, res.TPOTP90S = quantile(tpots, 0.5), quantile(tpots, 0.9)
	res.Series = make([]Point, len(st.points))
	for i, p := range st.points {
		if k := st.pointTicks[i]; k > 0 {
			p.PrefillEngines /= float64(k)
			p.DecodeEngines /= float64(k)
		}
		w := float64(st.sampleNs) / 1e9
		p.PrefillDemand /= w
		p.DecodeDemand /= w
		p.Attainment = 1
		if p.Arrivals > 0 {
			p.Attainment = float64(p.Met) / float64(p.Arrivals)
		}
		res.Series[i] = p
	}
	return res
}

func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	sort.Float64s(xs)
	return xs[min(int(q*float64(len(xs))), len(xs)-1)]
}
