package ring

import (
	"errors"
	"fmt"
	"math"
	"sync/atomic"
)

// None marks "no epoch yet".
const None = math.MinInt64

// MaxSlots bounds the number of slots of a ring so that tags (TagBits wide)
// never alias: see Compare.
const MaxSlots = 1 << 13

// DefaultMaxAheadNs is the default bound on how far past the newest bucket a
// single record may move the ring: see Ring.Admit.
const DefaultMaxAheadNs = int64(24 * 3600 * 1e9)

// ErrInvalidGeometry is returned for a width or retention the ring cannot
// hold.
var ErrInvalidGeometry = errors.New("ring: invalid geometry")

// Expirer drains the words of one slot that belong to the epoch through
// (exactly that epoch's tag); it returns the number of observations it
// drained. The structure
// built on a ring implements it; the ring decides when to call it.
type Expirer interface {
	ExpireSlot(slot int, through int64) int64
}

type slotState struct {
	epoch   atomic.Int64 // newest epoch ever claimed in the slot (None: never)
	drained atomic.Int64 // every word of epoch <= drained has been drained
}

// Ring is the time geometry shared by every bucketed structure: bucket width,
// retention, the slot of an epoch, the newest recorded epoch, and the
// expiring of slots that fall out of retention. The per-slot data itself
// lives in the structure that embeds the ring, as tagged words (see Add).
type Ring struct {
	widthNs    int64
	retention  int64
	keep       int64 // buckets older than newest-keep have expired
	mask       int64
	maxAhead   int64 // in epochs
	newest     atomic.Int64
	claimed    atomic.Int64 // the newest epoch ever claimed (None: none), beside newest
	_          Pad
	first      atomic.Int64
	farEpoch   atomic.Int64 // the last refused far-future epoch (None: none)
	jumps      atomic.Int64
	refusedOld atomic.Int64
	refusedFar atomic.Int64
	_          Pad
	slots      []slotState
}

// Init sets the ring up for buckets of widthNs nanoseconds retained for
// retentionNs: a bucket expires once its start lies more than retentionNs
// before the start of the newest recorded bucket, so the ring holds
// floor(retentionNs/widthNs)+1 buckets.
func (r *Ring) Init(widthNs, retentionNs int64) error {
	if widthNs <= 0 || retentionNs < widthNs {
		return fmt.Errorf("%w: width %d ns, retention %d ns (want width > 0 and retention >= width)", ErrInvalidGeometry, widthNs, retentionNs)
	}
	keep := retentionNs / widthNs
	if keep+1 > MaxSlots {
		return fmt.Errorf("%w: retention %d ns / width %d ns needs %d buckets, at most %d", ErrInvalidGeometry, retentionNs, widthNs, keep+1, MaxSlots)
	}
	n := int64(1)
	for n < keep+1 {
		n <<= 1
	}
	r.widthNs = widthNs
	r.retention = retentionNs
	r.keep = keep
	r.mask = n - 1
	r.maxAhead = DefaultMaxAheadNs / widthNs
	if r.maxAhead < keep {
		r.maxAhead = keep
	}
	r.newest.Store(None)
	r.claimed.Store(None)
	r.first.Store(None)
	r.farEpoch.Store(None)
	r.slots = make([]slotState, n)
	for i := range r.slots {
		r.slots[i].epoch.Store(None)
		r.slots[i].drained.Store(None)
	}
	return nil
}

// WidthNs is the bucket width.
func (r *Ring) WidthNs() int64 { return r.widthNs }

// RetentionNs is the configured retention.
func (r *Ring) RetentionNs() int64 { return r.retention }

// Keep is the number of buckets kept before the newest one.
func (r *Ring) Keep() int64 { return r.keep }

// Slots is the number of slots.
func (r *Ring) Slots() int { return len(r.slots) }

// Epoch is the bucket that holds tsNs (tsNs >= 0): bucket k covers
// [k*width, (k+1)*width), for writers and readers alike.
func (r *Ring) Epoch(tsNs int64) int64 { return tsNs / r.widthNs }

// Slot is the slot of an epoch.
func (r *Ring) Slot(epoch int64) int { return int(epoch & r.mask) }

// Newest is the newest recorded epoch, None before the first record.
func (r *Ring) Newest() int64 { return r.newest.Load() }

// First is the oldest epoch ever recorded, None before the first record.
func (r *Ring) First() int64 { return r.first.Load() }

// Oldest is the oldest retained epoch (None when empty): the newer of the
// oldest epoch ever recorded and newest-keep.
func (r *Ring) Oldest() int64 {
	n := r.newest.Load()
	if n == None {
		return None
	}
	o := n - r.keep
	if f := r.first.Load(); f > o {
		o = f
	}
	return o
}

// Retained reports whether epoch is within retention of the newest epoch.
func (r *Ring) Retained(epoch int64) bool {
	n := r.newest.Load()
	return n != None && epoch <= n && epoch >= n-r.keep
}

// Counters of refused records, for introspection.
func (r *Ring) Jumps() int64      { return r.jumps.Load() }
func (r *Ring) RefusedOld() int64 { return r.refusedOld.Load() }
func (r *Ring) RefusedFar() int64 { return r.refusedFar.Load() }

// Admit decides whether a record for epoch may be written, advancing the
// newest epoch (and expiring, through x, every slot that falls out of
// retention) when epoch is newer. The rule:
//
//   - the first record ever is admitted whatever its epoch;
//   - an epoch older than newest-keep is refused (its bucket has expired);
//   - an epoch up to maxAhead buckets (one day or one retention, whichever
//     is longer) past the newest becomes the newest;
//   - an epoch further ahead is refused, unless the previous refused
//     far-ahead record lies within one retention of it: two consistent
//     witnesses move the ring (an idle gap followed by traffic), one stray
//     timestamp never wipes the history.
func (r *Ring) Admit(epoch int64, x Expirer) bool {
	for {
		n := r.newest.Load()
		if n == None {
			if r.newest.CompareAndSwap(None, epoch) {
				r.first.CompareAndSwap(None, epoch)
				return true
			}
			continue
		}
		if epoch <= n {
			if epoch < n-r.keep {
				r.refusedOld.Add(1)
				return false
			}
			r.lowerFirst(epoch)
			return true
		}
		if epoch-n > r.maxAhead {
			f := r.farEpoch.Load()
			if f == None || epoch-f > r.keep || f-epoch > r.keep {
				r.farEpoch.Store(epoch)
				r.refusedFar.Add(1)
				return false
			}
		}
		if r.advanceFrom(n, epoch, x) {
			return true
		}
	}
}

// lowerFirst keeps first the oldest epoch ever admitted.
func (r *Ring) lowerFirst(epoch int64) {
	for {
		f := r.first.Load()
		if f <= epoch || r.first.CompareAndSwap(f, epoch) {
			return
		}
	}
}

// AdmitTs maps tsNs (>= 0) to its epoch and admits it (see Admit). The
// common case, tsNs in the newest bucket, costs one load and no division.
func (r *Ring) AdmitTs(tsNs int64, x Expirer) (int64, bool) {
	n := r.newest.Load()
	if n != None && uint64(tsNs-n*r.widthNs) < uint64(r.widthNs) {
		return n, true
	}
	return r.admitSlow(tsNs, x)
}

// NewestFast is the newest epoch (None when empty), for inlined fast paths.
func (r *Ring) NewestFast() int64 { return r.newest.Load() }

// AdmitSlow is AdmitTs without its fast path, for callers that inline it.
func (r *Ring) AdmitSlow(tsNs int64, x Expirer) (int64, bool) { return r.admitSlow(tsNs, x) }

// DrainStraggler is AfterWrite's slow path, for callers that inline it.
func (r *Ring) DrainStraggler(epoch int64, x Expirer) { r.drainStraggler(epoch, x) }

func (r *Ring) admitSlow(tsNs int64, x Expirer) (int64, bool) {
	e := tsNs / r.widthNs
	return e, r.Admit(e, x)
}

// Advance moves the newest epoch to the bucket of a trusted clock reading
// (the caller's own clock, e.g. the controller step), expiring what falls
// out of retention. It never moves backwards and has no far-ahead bound. It
// returns the observations expired.
func (r *Ring) Advance(nowNs int64, x Expirer) int64 {
	if nowNs < 0 {
		return 0
	}
	epoch := r.Epoch(nowNs)
	for {
		n := r.newest.Load()
		if n != None && epoch <= n {
			return 0
		}
		if n == None {
			if r.newest.CompareAndSwap(None, epoch) {
				r.first.CompareAndSwap(None, epoch)
				return 0
			}
			continue
		}
		var got int64
		if r.advanceCount(n, epoch, x, &got) {
			return got
		}
	}
}

func (r *Ring) advanceFrom(n, epoch int64, x Expirer) bool {
	var got int64
	return r.advanceCount(n, epoch, x, &got)
}

// advanceCount moves newest from n to epoch (CAS) and expires the epochs
// that fall out: those in (n-keep-1, epoch-keep-1], at most one per slot.
// Concurrent advances expire disjoint ranges.
func (r *Ring) advanceCount(n, epoch int64, x Expirer, got *int64) bool {
	if !r.newest.CompareAndSwap(n, epoch) {
		return false
	}
	if epoch-n > r.keep {
		r.jumps.Add(1)
	}
	r.farEpoch.Store(None)
	// Everything older than n-keep was drained by earlier advances, and
	// nothing newer than n was written before this CAS: the epochs that
	// just fell out and may hold data are [n-keep, min(n, epoch-keep-1)].
	hi := min(epoch-r.keep-1, n)
	for e := max(n-r.keep, 0); e <= hi; e++ {
		*got += r.expire(r.Slot(e), e, x)
	}
	return true
}

// Claim marks the slot of epoch as holding it. It returns false when the
// slot already holds a newer epoch: the caller is a straggler whose bucket
// has just been reused, and must not write. Before a slot moves to a new
// epoch, the epoch it held is drained (normally the advance that expired it
// has done so already), so a slot never mixes live words of two epochs that
// are far apart (their tags could alias).
func (r *Ring) Claim(epoch int64, x Expirer) bool {
	if r.slots[epoch&r.mask].epoch.Load() == epoch {
		return true
	}
	return r.claimSlow(epoch, x)
}

func (r *Ring) claimSlow(epoch int64, x Expirer) bool {
	s := int(epoch & r.mask)
	st := &r.slots[s]
	for {
		se := st.epoch.Load()
		if se == epoch {
			r.raiseClaimed(epoch)
			return true
		}
		if se > epoch {
			return false
		}
		if se != None && st.drained.Load() < se {
			r.expire(s, se, x)
		}
		if st.epoch.CompareAndSwap(se, epoch) {
			r.raiseClaimed(epoch)
			return true
		}
	}
}

// raiseClaimed keeps claimed the newest epoch ever claimed.
func (r *Ring) raiseClaimed(epoch int64) {
	for {
		c := r.claimed.Load()
		if c >= epoch || r.claimed.CompareAndSwap(c, epoch) {
			return
		}
	}
}

// Claimed is the newest epoch ever claimed (None before the first claim),
// for inlined fast paths: while it is retained (Claimed() >= Newest()-Keep(),
// read in that order), its slot holds it, as Holds would report, since a
// slot moves to a newer epoch only once that epoch is admitted, i.e. once
// the one it held has expired. It saves a writer in the newest bucket the
// slot table's load.
func (r *Ring) Claimed() int64 { return r.claimed.Load() }

// Holds reports whether the slot of epoch was claimed for epoch (readers use
// it to skip slots quickly; the words' tags remain the authority).
func (r *Ring) Holds(epoch int64) bool {
	return r.slots[epoch&r.mask].epoch.Load() == epoch
}

// AfterWrite must be called after a write for epoch: if the epoch expired
// while the write was in flight (a concurrent record advanced the ring), the
// writer drains its epoch's words itself, so that its count is accounted as
// expired exactly once (the drainer that ran before the write could not see
// it).
func (r *Ring) AfterWrite(epoch int64, x Expirer) {
	if epoch < r.newest.Load()-r.keep {
		r.drainStraggler(epoch, x)
	}
}

func (r *Ring) drainStraggler(epoch int64, x Expirer) {
	x.ExpireSlot(r.Slot(epoch), epoch)
}

// expire drains the expired epoch through from slot s, unless it was
// drained already. Only the slot's newest claimed epoch can hold data
// (Claim drains the previous one first), so through is narrowed to it.
func (r *Ring) expire(s int, through int64, x Expirer) int64 {
	st := &r.slots[s]
	se := st.epoch.Load()
	if se == None {
		return 0
	}
	target := min(se, through)
	d := st.drained.Load()
	if d >= target {
		return 0
	}
	got := x.ExpireSlot(s, target)
	for {
		d = st.drained.Load()
		if d >= target || st.drained.CompareAndSwap(d, target) {
			break
		}
	}
	return got
}

// Prune expires every slot whose epoch is older than newest-keep and
// returns the observations expired by this call.
func (r *Ring) Prune(x Expirer) int64 {
	n := r.newest.Load()
	if n == None {
		return 0
	}
	var got int64
	for s := range r.slots {
		se := r.slots[s].epoch.Load()
		if se != None && se < n-r.keep {
			got += r.expire(s, se, x)
		}
	}
	return got
}

// Range clamps the query [fromNs, toNs] (both inclusive) to retained
// epochs: every bucket that intersects the query, so the bucket containing
// fromNs is included whole. ok is false when nothing retained intersects.
func (r *Ring) Range(fromNs, toNs int64) (from, to int64, ok bool) {
	if toNs < fromNs || toNs < 0 {
		return 0, 0, false
	}
	if fromNs < 0 {
		fromNs = 0
	}
	o := r.Oldest()
	if o == None {
		return 0, 0, false
	}
	n := r.newest.Load()
	from, to = r.Epoch(fromNs), r.Epoch(toNs)
	if from < o {
		from = o
	}
	if to > n {
		to = n
	}
	return from, to, from <= to
}
