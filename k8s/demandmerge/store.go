package demandmerge

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/narwhal-io/narwhal/core/buckets"
)

// maxAheadNs bounds how far past the merged newest bucket a bucket may
// start: the same bound core/ring puts on a single core (24 h), so one
// router with a wild clock cannot expire everyone's history.
const maxAheadNs = int64(24 * 3600 * 1e9)

// Config is the leader's bucket geometry; it must match the routers'.
type Config struct {
	Demand buckets.DemandConfig `json:"demand" yaml:"demand"`
	// AttainmentIntervalNs (monitor_interval_s) and AttainmentRetentionNs
	// (four demand windows); 0 and 0 disable attainment merging.
	AttainmentIntervalNs  int64 `json:"attainment_interval_ns" yaml:"attainment_interval_ns"`
	AttainmentRetentionNs int64 `json:"attainment_retention_ns" yaml:"attainment_retention_ns"`
	// NowNs is the leader's clock and FutureToleranceNs how far after it
	// a bucket may start (the service passes events.max_future_s): a
	// bucket starting later is refused (Ahead), so one router whose clock
	// runs ahead cannot move the merged newest bucket and leave every
	// other router's buckets stale. Nil: no bound but the 24-h one.
	NowNs             func() int64 `json:"-" yaml:"-"`
	FutureToleranceNs int64        `json:"future_tolerance_ns" yaml:"future_tolerance_ns"`
}

type routerKey struct {
	router string
	epoch  uint64
}

// ApplyStats counts what Apply did with the buckets of the deltas it saw.
type ApplyStats struct {
	Deltas int64 `json:"deltas"`
	// Applied: bucket snapshots that replaced older ones (or were new).
	Applied int64 `json:"applied"`
	// Duplicate: bucket snapshots at or below the sequence already held
	// for that router epoch and bucket (replays, duplicates, reorders).
	Duplicate int64 `json:"duplicate"`
	// Stale: bucket snapshots older than the merged retention.
	Stale int64 `json:"stale"`
	// Far: bucket snapshots more than 24 h past the merged newest bucket.
	Far int64 `json:"far"`
	// Ahead: bucket snapshots starting more than FutureToleranceNs after
	// the leader's clock (a router's clock ahead).
	Ahead int64 `json:"ahead"`
}

// Store is the leader's merged view of every router's closed buckets.
type Store struct {
	instance string
	now      func() int64
	tolNs    int64
	mu       sync.RWMutex
	kinds    [buckets.NumKinds]kindState
	att      attState
	stats    ApplyStats
}

// New returns an empty store with the leader's geometry.
func New(cfg Config) (*Store, error) {
	dc := cfg.Demand
	if dc.BucketWidthNs <= 0 || dc.DemandWindowNs < dc.BucketWidthNs {
		return nil, fmt.Errorf("%w: bucket_width_ns %d, demand_window_ns %d (want width > 0 and window >= width)",
			ErrInvalidConfig, dc.BucketWidthNs, dc.DemandWindowNs)
	}
	if cfg.AttainmentIntervalNs < 0 || (cfg.AttainmentIntervalNs > 0 && cfg.AttainmentRetentionNs < cfg.AttainmentIntervalNs) {
		return nil, fmt.Errorf("%w: attainment_interval_ns %d, attainment_retention_ns %d (want 0, or interval > 0 and retention >= interval)",
			ErrInvalidConfig, cfg.AttainmentIntervalNs, cfg.AttainmentRetentionNs)
	}
	var id [8]byte
	_, _ = rand.Read(id[:]) // never fails (crypto/rand panics instead)
	if cfg.FutureToleranceNs < 0 {
		return nil, fmt.Errorf("%w: future_tolerance_ns %d (want >= 0)", ErrInvalidConfig, cfg.FutureToleranceNs)
	}
	s := &Store{instance: hex.EncodeToString(id[:]), now: cfg.NowNs, tolNs: cfg.FutureToleranceNs}
	windows := [buckets.NumKinds]int64{buckets.ArrivalsWindows, buckets.ResidencyWindows, buckets.OutputsWindows}
	for k := range s.kinds {
		s.kinds[k].init(dc.BucketWidthNs, windows[k]*dc.DemandWindowNs)
	}
	if cfg.AttainmentIntervalNs > 0 {
		s.att.init(cfg.AttainmentIntervalNs, cfg.AttainmentRetentionNs)
	}
	return s, nil
}

// Apply merges one delta. A delta that fails validation changes nothing
// and returns an error wrapping ErrInvalidDelta. Per (router, epoch,
// bucket) the snapshot with the highest Seq wins, so applying a delta
// twice, or an older delta after a newer one, changes nothing.
func (s *Store) Apply(d *Delta) error {
	if err := d.validate(s.kinds[0].widthNs, s.att.widthNs); err != nil {
		return err
	}
	rk := routerKey{d.Router, d.Epoch}
	lim := int64(math.MaxInt64)
	if s.now != nil {
		lim = satAdd(s.now(), s.tolNs)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.Deltas++
	for i := range d.Demand {
		b := &d.Demand[i]
		s.count(s.kinds[b.Kind].apply(rk, d.Seq, b, lim))
	}
	if s.att.widthNs > 0 {
		for i := range d.Attainment {
			s.count(s.att.apply(rk, d.Seq, &d.Attainment[i], lim))
		}
	}
	for k := range s.kinds {
		s.kinds[k].prune()
	}
	s.att.prune()
	return nil
}

type outcome uint8

const (
	applied outcome = iota
	duplicate
	stale
	far
	ahead
)

// satAdd is a + b for b >= 0, saturating at the largest int64.
func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

func (s *Store) count(o outcome) {
	switch o {
	case applied:
		s.stats.Applied++
	case duplicate:
		s.stats.Duplicate++
	case stale:
		s.stats.Stale++
	case far:
		s.stats.Far++
	case ahead:
		s.stats.Ahead++
	}
}

// Instance identifies this store: a new leader has a new, empty store, and
// routers that see the instance change resend everything they retain.
func (s *Store) Instance() string { return s.instance }

// Stats returns what Apply has done so far.
func (s *Store) Stats() ApplyStats {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.stats
}

// ring is the epoch bookkeeping both kinds of buckets share, with the
// semantics of core/ring: newest recorded epoch, oldest epoch ever
// recorded, and retention of keep buckets behind the newest.
type ring struct {
	widthNs     int64
	retentionNs int64
	keep        int64
	has         bool
	first       int64
	newest      int64
}

func (r *ring) init(widthNs, retentionNs int64) {
	r.widthNs, r.retentionNs, r.keep = widthNs, retentionNs, retentionNs/widthNs
}

// admit classifies a bucket epoch before it is stored; a bucket starting
// after limNs (the leader's clock plus the tolerance) is ahead.
func (r *ring) admit(e, limNs int64) (outcome, bool) {
	if e > limNs/r.widthNs {
		return ahead, false
	}
	if !r.has {
		return applied, true
	}
	if e < r.newest-r.keep {
		return stale, false
	}
	if e > r.newest+maxAheadNs/r.widthNs {
		return far, false
	}
	return applied, true
}

func (r *ring) record(e int64) {
	if !r.has {
		r.has, r.first, r.newest = true, e, e
		return
	}
	r.first, r.newest = min(r.first, e), max(r.newest, e)
}

func (r *ring) oldest() int64 { return max(r.first, r.newest-r.keep) }

// span clips [fromNs, toNs] to the retained epochs, as core/ring.Range.
func (r *ring) span(fromNs, toNs int64) (from, to int64, ok bool) {
	if toNs < fromNs || toNs < 0 || !r.has {
		return 0, 0, false
	}
	fromNs = max(fromNs, 0)
	from, to = max(fromNs/r.widthNs, r.oldest()), min(toNs/r.widthNs, r.newest)
	return from, to, from <= to
}

// kindState is one demand kind merged over every router.
type kindState struct {
	ring
	buckets map[int64]*mergedBucket
	scratch map[buckets.Shape]int64 // reused by merge
}

type demandPart struct {
	seq uint64
	b   DemandBucket
}

// mergedBucket holds each router epoch's snapshot of one bucket and their
// merge, rebuilt whenever a snapshot changes.
type mergedBucket struct {
	parts    map[routerKey]*demandPart
	cells    []buckets.Cell // sorted by shape, at most ExactCells
	exact    int64
	overflow buckets.Cohort
	unsized  int64
	invalid  bool
}

func (k *kindState) init(widthNs, retentionNs int64) {
	k.ring.init(widthNs, retentionNs)
	k.buckets = map[int64]*mergedBucket{}
	k.scratch = map[buckets.Shape]int64{}
}

func (k *kindState) apply(rk routerKey, seq uint64, b *DemandBucket, limNs int64) outcome {
	e := b.StartNs / k.widthNs
	if o, ok := k.admit(e, limNs); !ok {
		return o
	}
	mb := k.buckets[e]
	if mb == nil {
		mb = &mergedBucket{parts: map[routerKey]*demandPart{}}
		k.buckets[e] = mb
	}
	if p := mb.parts[rk]; p != nil && p.seq >= seq {
		return duplicate
	}
	cp := *b
	cp.Cells = slices.Clone(b.Cells)
	mb.parts[rk] = &demandPart{seq: seq, b: cp}
	mb.merge(k.scratch)
	if !b.empty() {
		k.record(e)
	}
	return applied
}

func (k *kindState) prune() {
	if !k.has {
		return
	}
	for e := range k.buckets {
		if e < k.oldest() {
			delete(k.buckets, e)
		}
	}
}

// merge rebuilds the bucket from its parts: counts of one shape add up;
// when more than ExactCells shapes result, the ExactCells most frequent
// (ties: smaller shape first) stay exact and the rest spill into the
// overflow cohort, which keeps every count and is priced by its largest
// input and output. The choice depends only on the parts' content, never
// on the order they arrived in.
func (mb *mergedBucket) merge(counts map[buckets.Shape]int64) {
	clear(counts)
	mb.overflow, mb.unsized, mb.invalid = buckets.Cohort{}, 0, false
	for _, p := range mb.parts {
		for _, c := range p.b.Cells {
			counts[buckets.Shape{Input: c[0], Output: c[1]}] += c[2]
		}
		mergeCohort(&mb.overflow, p.b.Overflow)
		mb.unsized += p.b.Unsized
		mb.invalid = mb.invalid || p.b.Invalid
	}
	cells := mb.cells[:0]
	for sh, n := range counts {
		cells = append(cells, buckets.Cell{Shape: sh, Count: n})
	}
	if len(cells) > buckets.ExactCells {
		slices.SortFunc(cells, func(a, b buckets.Cell) int {
			if c := cmp.Compare(b.Count, a.Count); c != 0 {
				return c
			}
			return compareShape(a.Shape, b.Shape)
		})
		for _, c := range cells[buckets.ExactCells:] {
			mergeCohort(&mb.overflow, buckets.Cohort{Count: c.Count, MaxInput: c.Shape.Input,
				MaxOutput: c.Shape.Output, ZeroOutput: c.Shape.Output == 0})
		}
		cells = cells[:buckets.ExactCells]
	}
	slices.SortFunc(cells, func(a, b buckets.Cell) int { return compareShape(a.Shape, b.Shape) })
	mb.cells = cells
	mb.exact = 0
	for _, c := range cells {
		mb.exact += c.Count
	}
}

func compareShape(a, b buckets.Shape) int {
	if c := cmp.Compare(a.Input, b.Input); c != 0 {
		return c
	}
	return cmp.Compare(a.Output, b.Output)
}

func mergeCohort(dst *buckets.Cohort, c buckets.Cohort) {
	if c.Count == 0 {
		return
	}
	dst.Count += c.Count
	dst.MaxInput = max(dst.MaxInput, c.MaxInput)
	dst.MaxOutput = max(dst.MaxOutput, c.MaxOutput)
	dst.ZeroOutput = dst.ZeroOutput || c.ZeroOutput
}

// attState is attainment merged over every router.
type attState struct {
	ring
	buckets map[int64]*mergedAtt
}

type attPart struct {
	seq uint64
	by  [buckets.NumOutcomes]buckets.Counts
}

type mergedAtt struct {
	parts map[routerKey]*attPart
	by    [buckets.NumOutcomes]buckets.Counts
}

func (a *attState) init(widthNs, retentionNs int64) {
	a.ring.init(widthNs, retentionNs)
	a.buckets = map[int64]*mergedAtt{}
}

func (a *attState) apply(rk routerKey, seq uint64, b *AttainmentBucket, limNs int64) outcome {
	e := b.StartNs / a.widthNs
	if o, ok := a.admit(e, limNs); !ok {
		return o
	}
	mb := a.buckets[e]
	if mb == nil {
		mb = &mergedAtt{parts: map[routerKey]*attPart{}}
		a.buckets[e] = mb
	}
	if p := mb.parts[rk]; p != nil && p.seq >= seq {
		return duplicate
	}
	mb.parts[rk] = &attPart{seq: seq, by: b.ByOutcome}
	mb.by = [buckets.NumOutcomes]buckets.Counts{}
	for _, p := range mb.parts {
		for o := range mb.by {
			mb.by[o].Total += p.by[o].Total
			mb.by[o].TTFTMet += p.by[o].TTFTMet
			mb.by[o].TPOTMet += p.by[o].TPOTMet
		}
	}
	if !b.empty() {
		a.record(e)
	}
	return applied
}

func (a *attState) prune() {
	if !a.has {
		return
	}
	for e := range a.buckets {
		if e < a.oldest() {
			delete(a.buckets, e)
		}
	}
}
