package sim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Request is one trace row after loading: arrival offset from the start of
// the (concatenated, scaled) workload, and the true token counts.
type Request struct {
	ArrivalNs    int64 // from workload start
	InputTokens  int64 // exact prompt tokens (what the tokenizer says)
	OutputTokens int64 // tokens actually generated
	// Filled by Prepare:
	EstInputTokens int64 // router's local estimate (bytes/4 style), before tokenization
	ReqOutput      int64 // max_tokens the client sent; 0 = none
	Trace          int   // index of the trace file it came from
}

// Sentinel errors.
var (
	ErrBadTrace       = errors.New("bad trace")
	ErrUnknownProfile = errors.New("unknown profile")
	ErrBadConfig      = errors.New("bad config")
)

// azureTimeLayout parses "2023-11-16 18:15:46.6805900" (7 fractional digits).
const azureTimeLayout = "2006-01-02 15:04:05.999999999"

// LoadTrace reads an Azure LLM inference CSV (TIMESTAMP,ContextTokens,
// GeneratedTokens) or a Mooncake JSONL trace (timestamp ms, input_length,
// output_length), chosen by content. Arrivals are made relative to the
// file's first request and sorted.
func LoadTrace(path string) ([]Request, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("sim: open trace: %w", err)
	}
	defer f.Close()
	reqs, err := ReadTrace(f)
	if err != nil {
		return nil, fmt.Errorf("sim: trace %s: %w", path, err)
	}
	return reqs, nil
}

// ReadTrace is LoadTrace on a reader.
func ReadTrace(r io.Reader) ([]Request, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	first, err := br.Peek(1)
	if err != nil {
		return nil, fmt.Errorf("empty: %w", ErrBadTrace)
	}
	var reqs []Request
	if first[0] == '{' {
		reqs, err = readMooncake(br)
	} else {
		reqs, err = readAzure(br)
	}
	if err != nil {
		return nil, err
	}
	if len(reqs) == 0 {
		return nil, fmt.Errorf("no requests: %w", ErrBadTrace)
	}
	sortByArrival(reqs)
	t0 := reqs[0].ArrivalNs
	for i := range reqs {
		reqs[i].ArrivalNs -= t0
	}
	return reqs, nil
}

func readAzure(br *bufio.Reader) ([]Request, error) {
	sc := bufio.NewScanner(br)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	var reqs []Request
	line := 0
	for sc.Scan() {
		line++
		s := strings.TrimSpace(sc.Text())
		if s == "" {
			continue
		}
		if line == 1 && strings.HasPrefix(s, "TIMESTAMP") {
			continue
		}
		parts := strings.Split(s, ",")
		if len(parts) != 3 {
			return nil, fmt.Errorf("line %d: want 3 columns, got %d: %w", line, len(parts), ErrBadTrace)
		}
		ts, err := time.Parse(azureTimeLayout, parts[0])
		if err != nil {
			return nil, fmt.Errorf("line %d: timestamp %q: %w", line, parts[0], ErrBadTrace)
		}
		in, err1 := strconv.ParseInt(parts[1], 10, 64)
		out, err2 := strconv.ParseInt(parts[2], 10, 64)
		if err1 != nil || err2 != nil || in < 1 || out < 0 {
			return nil, fmt.Errorf("line %d: token counts %q,%q: %w", line, parts[1], parts[2], ErrBadTrace)
		}
		reqs = append(reqs, Request{ArrivalNs: ts.UnixNano(), InputTokens: in, OutputTokens: out})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	return reqs, nil
}

type mooncakeRow struct {
	Timestamp    *float64 `json:"timestamp"`
	InputLength  *int64   `json:"input_length"`
	OutputLength *int64   `json:"output_length"`
}

func readMooncake(br *bufio.Reader) ([]Request, error) {
	sc := bufio.NewScanner(br)
	sc.Buffer(make([]byte, 0, 1<<16), 16<<20)
	var reqs []Request
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var row mooncakeRow
		if err := json.Unmarshal(b, &row); err != nil {
			return nil, fmt.Errorf("line %d: %v: %w", line, err, ErrBadTrace)
		}
		if row.Timestamp == nil || row.InputLength == nil || row.OutputLength == nil ||
			*row.InputLength < 1 || *row.OutputLength < 0 || *row.Timestamp < 0 || math.IsNaN(*row.Timestamp) {
			return nil, fmt.Errorf("line %d: missing or invalid timestamp/input_length/output_length: %w", line, ErrBadTrace)
		}
		reqs = append(reqs, Request{
			ArrivalNs:    int64(*row.Timestamp * 1e6),
			InputTokens:  *row.InputLength,
			OutputTokens: *row.OutputLength,
		})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	return reqs, nil
}

func sortByArrival(reqs []Request) {
	sorted := true
	for i := 1; i < len(reqs); i++ {
		if reqs[i].ArrivalNs < reqs[i-1].ArrivalNs {
			sorted = false
			break
		}
	}
	if sorted {
		return
	}
	sort.SliceStable(reqs, func(i, j int) bool { return reqs[i].ArrivalNs < reqs[j].ArrivalNs })
}

// maxTimelineS bounds the workload's timeline (a year): arrival times stay
// within int64 nanoseconds and the time series Run keeps per sample_s
// stays bounded.
const maxTimelineS = 365 * 24 * 3600

// Workload builds the simulated arrival sequence: each trace is compressed
// by its rate scale (inter-arrival times divided by the scale), traces are
// concatenated in order (trace k+1 starts one mean inter-arrival gap after
// the last arrival of trace k), then the slice [fromS, toS) of the
// resulting timeline is kept (toS ≤ 0: to the end) and re-based to 0.
// The timeline and the slice bounds must stay within maxTimelineS.
// scales has one entry per trace, or one entry for all.
func Workload(traces [][]Request, scales []float64, fromS, toS float64) ([]Request, error) {
	if len(traces) == 0 {
		return nil, fmt.Errorf("sim: no traces: %w", ErrBadConfig)
	}
	if len(scales) != 1 && len(scales) != len(traces) {
		return nil, fmt.Errorf("sim: %d rate scales for %d traces (want 1 or one per trace): %w", len(scales), len(traces), ErrBadConfig)
	}
	for _, s := range scales {
		if !(s > 0) || math.IsInf(s, 0) {
			return nil, fmt.Errorf("sim: rate scale %v must be > 0: %w", s, ErrBadConfig)
		}
	}
	if !(fromS >= 0 && fromS <= maxTimelineS) || !(math.Abs(toS) <= maxTimelineS) || (toS > 0 && toS <= fromS) {
		return nil, fmt.Errorf("sim: slice %v:%v: want 0 <= A < B <= %d seconds (B <= 0: to the end): %w", fromS, toS, maxTimelineS, ErrBadConfig)
	}
	var out []Request
	var offset int64
	for k, tr := range traces {
		if len(tr) == 0 {
			continue
		}
		scale := scales[0]
		if len(scales) > 1 {
			scale = scales[k]
		}
		var last int64
		for _, r := range tr {
			if at := float64(offset) + float64(r.ArrivalNs)/scale; !(at <= maxTimelineS*1e9) {
				return nil, fmt.Errorf("sim: rate scale %v spans trace %d past %d s: %w", scale, k, maxTimelineS, ErrBadConfig)
			}
			r.ArrivalNs = offset + int64(float64(r.ArrivalNs)/scale)
			r.Trace = k
			out = append(out, r)
			last = r.ArrivalNs
		}
		gap := int64(0)
		if len(tr) > 1 {
			gap = (last - offset) / int64(len(tr)-1)
		}
		offset = last + max(gap, 1)
	}
	if fromS > 0 || toS > 0 {
		from := int64(fromS * 1e9)
		to := int64(math.MaxInt64)
		if toS > 0 {
			to = int64(toS * 1e9)
		}
		kept := out[:0]
		for _, r := range out {
			if r.ArrivalNs >= from && r.ArrivalNs < to {
				r.ArrivalNs -= from
				kept = append(kept, r)
			}
		}
		out = kept
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("sim: slice %v:%v leaves no requests: %w", fromS, toS, ErrBadConfig)
	}
	return out, nil
}

// Prepare fills the fields a real router would see but the traces do not
// carry, from a seeded RNG (same seed, same values):
//
//   - ReqOutput (max_tokens): with probability NoMaxTokensFrac the client
//     sends none (0); otherwise it sends a round cap ≥ the actual output,
//     the smallest of 256, 512, 1024, 2048, 4096 that covers it (clients
//     pick round caps; the actual output never exceeds the cap).
//   - EstInputTokens: the exact count times a lognormal error
//     exp(N(0, EstErrSigma)), at least 1: a bytes/4 estimate is unbiased
//     in the median but off by ±10–30 % per request depending on language
//     and code.
func Prepare(reqs []Request, seed uint64, noMaxTokensFrac, estErrSigma float64) {
	rng := rand.New(rand.NewPCG(seed, 0x6e61727768616c))
	for i := range reqs {
		r := &reqs[i]
		if rng.Float64() < noMaxTokensFrac {
			r.ReqOutput = 0
		} else {
			c := int64(256)
			for c < r.OutputTokens {
				c *= 2
			}
			r.ReqOutput = c
		}
		est := math.Round(float64(r.InputTokens) * math.Exp(rng.NormFloat64()*estErrSigma))
		r.EstInputTokens = max(int64(est), 1)
	}
}
