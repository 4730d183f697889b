package buckettest

import (
	"sort"
	"sync"

	"github.com/narwhal-io/narwhal/core/buckets"
)

const (
	none       = int64(-1 << 63)
	dayNs      = int64(24 * 3600 * 1e9)
	atMaxLimit = 1<<25 - 1
)

// clock is the reference time geometry.
type clock struct {
	width, keep, retention int64
	maxAhead               int64
	newest, first, far     int64
}

func newClock(width, retention int64) clock {
	c := clock{width: width, retention: retention, keep: retention / width, newest: none, first: none, far: none}
	c.maxAhead = dayNs / width
	if c.maxAhead < c.keep {
		c.maxAhead = c.keep
	}
	return c
}

// admit applies the admission rule; advanced reports the new newest.
func (c *clock) admit(e int64) (ok, advanced bool) {
	if c.newest == none {
		c.newest, c.first = e, e
		return true, true
	}
	if e <= c.newest {
		if e < c.newest-c.keep {
			return false, false
		}
		c.first = min(c.first, e)
		return true, false
	}
	if e-c.newest > c.maxAhead {
		if c.far == none || e-c.far > c.keep || c.far-e > c.keep {
			c.far = e
			return false, false
		}
	}
	c.newest = e
	c.far = none
	return true, true
}

func (c *clock) advance(now int64) bool {
	if now < 0 {
		return false
	}
	e := now / c.width
	if c.newest != none && e <= c.newest {
		return false
	}
	if c.newest == none {
		c.newest, c.first = e, e
		return false
	}
	c.newest = e
	c.far = none
	return true
}

func (c *clock) oldest() int64 {
	if c.newest == none {
		return none
	}
	o := c.newest - c.keep
	if c.first > o {
		o = c.first
	}
	return o
}

func (c *clock) rng(from, to int64) (int64, int64, bool) {
	if to < from || to < 0 {
		return 0, 0, false
	}
	if from < 0 {
		from = 0
	}
	o := c.oldest()
	if o == none {
		return 0, 0, false
	}
	f, t := from/c.width, to/c.width
	if f < o {
		f = o
	}
	if t > c.newest {
		t = c.newest
	}
	return f, t, f <= t
}

type maxWord struct {
	set      bool
	max, atN int64
}

func (m *maxWord) raise(v int64) {
	switch {
	case !m.set || v > m.max:
		*m = maxWord{set: true, max: v, atN: 1}
	case v == m.max && m.atN < atMaxLimit:
		m.atN++
	}
}

func (m *maxWord) lower(v int64) (last bool) {
	if !m.set || m.max != v || m.atN == 0 || m.atN == atMaxLimit {
		return false
	}
	m.atN--
	return m.atN == 0
}

type bucket struct {
	keys     [buckets.ExactCells]*buckets.Shape
	counts   [buckets.ExactCells]int64
	overflow int64
	maxIn    maxWord
	maxOut   maxWord
	zeroN    int64
	zeroSeen bool
	invalid  bool
	unsized  int64
}

func (b *bucket) sized() int64 {
	n := b.overflow
	for _, c := range b.counts {
		n += c
	}
	return n
}

// HistoryModel is the reference for buckets.History.
type HistoryModel struct {
	mu       sync.Mutex
	c        clock
	b        map[int64]*bucket
	expSized int64
	expUns   int64
}

// NewHistoryModel mirrors buckets.NewHistory (arguments assumed valid).
func NewHistoryModel(widthNs, retentionNs int64) *HistoryModel {
	return &HistoryModel{c: newClock(widthNs, retentionNs), b: map[int64]*bucket{}}
}

func (m *HistoryModel) expire() {
	for e, b := range m.b {
		if e < m.c.newest-m.c.keep {
			m.expSized += b.sized()
			m.expUns += b.unsized
			delete(m.b, e)
		}
	}
}

func (m *HistoryModel) bucketFor(ts int64) (*bucket, bool) {
	if ts < 0 {
		return nil, false
	}
	e := ts / m.c.width
	ok, adv := m.c.admit(e)
	if !ok {
		return nil, false
	}
	if adv {
		m.expire()
	}
	b := m.b[e]
	if b == nil {
		b = &bucket{}
		m.b[e] = b
	}
	return b, true
}

func valid(s buckets.Shape) bool {
	return s.Input >= 0 && s.Output >= 0 && s.Input <= buckets.MaxTokens && s.Output <= buckets.MaxTokens
}

// cell finds s's cell, claiming a free one when claim is set; -1: overflow.
func (b *bucket) cell(s buckets.Shape, claim bool) int {
	home := buckets.ProbeStart(s)
	for j := 0; j < buckets.ProbeWindow; j++ {
		i := (home + j) % buckets.ExactCells
		switch {
		case b.keys[i] != nil && *b.keys[i] == s:
			return i
		case b.keys[i] == nil && claim:
			k := s
			b.keys[i] = &k
			return i
		}
	}
	return -1
}

func (b *bucket) add(s buckets.Shape) {
	if i := b.cell(s, true); i >= 0 {
		b.counts[i]++
		return
	}
	b.overflow++
	b.maxIn.raise(s.Input)
	b.maxOut.raise(s.Output)
	if s.Output == 0 {
		b.zeroN++
		b.zeroSeen = true
	}
}

// Record mirrors History.Record.
func (m *HistoryModel) Record(ts int64, s buckets.Shape) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !valid(s) {
		return false
	}
	b, ok := m.bucketFor(ts)
	if !ok {
		return false
	}
	b.add(s)
	return true
}

// RecordUnsized mirrors History.RecordUnsized.
func (m *HistoryModel) RecordUnsized(ts int64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.bucketFor(ts)
	if !ok {
		return false
	}
	b.unsized++
	return true
}

// Reprice mirrors History.Reprice.
func (m *HistoryModel) Reprice(ts int64, from, to buckets.Shape) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ts < 0 || !valid(from) || !valid(to) {
		return false
	}
	e := ts / m.c.width
	b := m.b[e]
	if b == nil || m.c.newest == none || e > m.c.newest || e < m.c.newest-m.c.keep {
		return false
	}
	i := b.cell(from, false)
	if i >= 0 {
		if b.counts[i] == 0 {
			return false
		}
		b.counts[i]--
	} else {
		if b.overflow == 0 {
			return false
		}
		b.overflow--
		if b.cell(to, true) < 0 { // stays in the cohort: the boundary stands
			b.add(to)
			b.maxIn.lower(from.Input)
			b.maxOut.lower(from.Output)
			if from.Output == 0 && b.zeroN > 0 {
				b.zeroN--
			}
			return true
		}
		inv := b.maxIn.lower(from.Input)
		if b.maxOut.lower(from.Output) {
			inv = true
		}
		if from.Output == 0 && b.zeroN > 0 {
			b.zeroN--
			if b.zeroN == 0 {
				inv = true
			}
		}
		if inv {
			b.invalid = true
		}
	}
	b.add(to)
	return true
}

// Advance mirrors History.Advance; it returns the observations expired.
func (m *HistoryModel) Advance(now int64) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	before := m.expSized + m.expUns
	if m.c.advance(now) {
		m.expire()
	}
	return m.expSized + m.expUns - before
}

// Expired mirrors History.Expired.
func (m *HistoryModel) Expired() (sized, unsized int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.expSized, m.expUns
}

// Window mirrors History.Window (cells in the same order).
func (m *HistoryModel) Window(from, to int64) ([]buckets.Cell, buckets.Window) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f, t, ok := m.c.rng(from, to)
	if !ok {
		return nil, buckets.Window{FromNs: from, ToNs: to}
	}
	w := buckets.Window{FromNs: f * m.c.width, ToNs: (t + 1) * m.c.width, Buckets: int(t - f + 1)}
	var cells []buckets.Cell
	for e := f; e <= t; e++ {
		b := m.b[e]
		if b == nil {
			continue
		}
		for i, k := range b.keys {
			if k != nil && b.counts[i] > 0 {
				cells = append(cells, buckets.Cell{Shape: *k, Count: b.counts[i]})
				w.Exact += b.counts[i]
			}
		}
		w.Unsized += b.unsized
		if b.invalid {
			w.InvalidBuckets++
		}
		if b.overflow > 0 {
			w.Overflow.Count += b.overflow
			w.Overflow.MaxInput = max(w.Overflow.MaxInput, b.maxIn.max)
			w.Overflow.MaxOutput = max(w.Overflow.MaxOutput, b.maxOut.max)
			w.Overflow.ZeroOutput = w.Overflow.ZeroOutput || b.zeroSeen
		}
	}
	return cells, w
}

// Evidence mirrors History.Evidence.
func (m *HistoryModel) Evidence(cutoff, to int64) buckets.Evidence {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ev buckets.Evidence
	if cutoff < 0 {
		cutoff = 0
	}
	f, t, ok := m.c.rng(cutoff, to)
	if !ok {
		return ev
	}
	if f*m.c.width < cutoff {
		if b := m.b[f]; b != nil && b.sized() > 0 {
			ev.SkippedStraddling = 1
		}
		f++
	}
	first, last := int64(-1), int64(-1)
	for e := f; e <= t; e++ {
		b := m.b[e]
		if b != nil && b.invalid {
			ev.SkippedInvalid++
			continue
		}
		if first < 0 {
			first = e
		}
		last = e
		ev.Buckets++
		if b != nil {
			ev.Observations += b.sized()
			ev.Overflow += b.overflow
		}
	}
	if first >= 0 {
		ev.SpanNs = (last - first + 1) * m.c.width
	}
	return ev
}

// Stats mirrors History.Stats.
func (m *HistoryModel) Stats() buckets.KindStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := buckets.KindStats{CellLimit: buckets.ExactCells * (m.c.keep + 1)}
	for _, b := range m.b {
		for i, k := range b.keys {
			if k != nil {
				st.RetainedCells++
			}
			st.Observations += b.counts[i]
		}
		st.Observations += b.overflow
		st.OverflowObservations += b.overflow
	}
	return st
}

// BucketCells is the number of exact cells claimed in the bucket of ts
// (-1 when the bucket is not retained).
func (m *HistoryModel) BucketCells(ts int64) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	b := m.b[ts/m.c.width]
	if b == nil {
		return -1
	}
	n := 0
	for _, k := range b.keys {
		if k != nil {
			n++
		}
	}
	return n
}

// OverflowedMax is the largest input and output ever sent to the overflow
// cohort of the bucket of ts (ok false when none).
func (m *HistoryModel) OverflowedMax(ts int64) (in, out int64, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b := m.b[ts/m.c.width]
	if b == nil || !b.maxIn.set {
		return 0, 0, false
	}
	return b.maxIn.max, b.maxOut.max, true
}

// Buckets lists the retained buckets' epochs.
func (m *HistoryModel) Buckets() []int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]int64, 0, len(m.b))
	for e := range m.b {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// Retained is every retained sized and unsized observation.
func (m *HistoryModel) Retained() (sized, unsized int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, b := range m.b {
		sized += b.sized()
		unsized += b.unsized
	}
	return sized, unsized
}

// SpanNs is the retained span: start of the oldest bucket holding anything
// to the start of the newest bucket (0 when empty).
func (m *HistoryModel) SpanNs() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.c.newest == none {
		return 0
	}
	oldest := m.c.newest
	for e := range m.b {
		oldest = min(oldest, e)
	}
	return (m.c.newest - oldest) * m.c.width
}

// SortCells orders cells by shape then count, for order-free comparisons.
func SortCells(c []buckets.Cell) {
	sort.Slice(c, func(i, j int) bool {
		a, b := c[i], c[j]
		if a.Shape.Input != b.Shape.Input {
			return a.Shape.Input < b.Shape.Input
		}
		if a.Shape.Output != b.Shape.Output {
			return a.Shape.Output < b.Shape.Output
		}
		return a.Count < b.Count
	})
}

// AttainmentModel is the reference for buckets.Attainment.
type AttainmentModel struct {
	mu      sync.Mutex
	c       clock
	b       map[int64]*[buckets.NumOutcomes]buckets.Counts
	expired int64
}

// NewAttainmentModel mirrors buckets.NewAttainment.
func NewAttainmentModel(intervalNs, retentionNs int64) *AttainmentModel {
	return &AttainmentModel{c: newClock(intervalNs, retentionNs), b: map[int64]*[buckets.NumOutcomes]buckets.Counts{}}
}

func (m *AttainmentModel) expire() {
	for e, b := range m.b {
		if e < m.c.newest-m.c.keep {
			for _, c := range b {
				m.expired += c.Total
			}
			delete(m.b, e)
		}
	}
}

// Record mirrors Attainment.Record.
func (m *AttainmentModel) Record(ts int64, o buckets.Outcome, ttft, tpot bool) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ts < 0 || o >= buckets.NumOutcomes {
		return false
	}
	e := ts / m.c.width
	ok, adv := m.c.admit(e)
	if !ok {
		return false
	}
	if adv {
		m.expire()
	}
	b := m.b[e]
	if b == nil {
		b = &[buckets.NumOutcomes]buckets.Counts{}
		m.b[e] = b
	}
	b[o].Total++
	if ttft {
		b[o].TTFTMet++
	}
	if tpot {
		b[o].TPOTMet++
	}
	return true
}

// Advance mirrors Attainment.Advance.
func (m *AttainmentModel) Advance(now int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.c.advance(now) {
		m.expire()
	}
}

// Window mirrors Attainment.Window.
func (m *AttainmentModel) Window(from, to int64) buckets.AttainmentWindow {
	m.mu.Lock()
	defer m.mu.Unlock()
	f, t, ok := m.c.rng(from, to)
	if !ok {
		return buckets.AttainmentWindow{FromNs: from, ToNs: to}
	}
	w := buckets.AttainmentWindow{FromNs: f * m.c.width, ToNs: (t + 1) * m.c.width, Buckets: int(t - f + 1)}
	for e := f; e <= t; e++ {
		if b := m.b[e]; b != nil {
			for o, c := range b {
				w.ByOutcome[o].Total += c.Total
				w.ByOutcome[o].TTFTMet += c.TTFTMet
				w.ByOutcome[o].TPOTMet += c.TPOTMet
			}
		}
	}
	return w
}

// CoveredS mirrors Attainment.CoveredS.
func (m *AttainmentModel) CoveredS(now int64) float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	o := m.c.oldest()
	if o == none {
		return 0
	}
	age := min(now-o*m.c.width, m.c.retention)
	return float64(max(age, 0)) / 1e9
}

// Expired is every request expired.
func (m *AttainmentModel) Expired() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.expired
}
