package demandmerge

import (
	"fmt"
	"hash/fnv"
	"slices"

	"github.com/narwhal-io/narwhal/core/buckets"
)

// Exporter runs beside one router's embedded core and builds the deltas
// it ships to the leader: a snapshot of every closed bucket whose content
// changed since the last acknowledged delta (a repricing can change a
// closed bucket; a bucket that did not change is not sent again).
//
// An Exporter is not safe for concurrent use: one goroutine calls Next,
// sends, and calls Ack.
type Exporter struct {
	router string
	epoch  uint64
	seq    uint64
	demand *buckets.Demand
	att    *buckets.Attainment
	attW   int64
	attN   int64 // attainment buckets retained

	acked      [buckets.NumKinds]map[int64]uint64 // bucket start -> content hash
	attAcked   map[int64]uint64
	pendingSeq uint64
	pending    [buckets.NumKinds]map[int64]uint64
	attPending map[int64]uint64
	cells      []buckets.Cell
}

// NewExporter exports d (and att, when not nil, with its interval and
// retention) for router in epoch.
func NewExporter(router string, epoch uint64, d *buckets.Demand, att *buckets.Attainment, attIntervalNs, attRetentionNs int64) (*Exporter, error) {
	if router == "" || d == nil {
		return nil, fmt.Errorf("%w: exporter needs a router id and a demand", ErrInvalidConfig)
	}
	if att != nil && (attIntervalNs <= 0 || attRetentionNs < attIntervalNs) {
		return nil, fmt.Errorf("%w: attainment interval %d ns, retention %d ns", ErrInvalidConfig, attIntervalNs, attRetentionNs)
	}
	x := &Exporter{router: router, epoch: epoch, demand: d, att: att, attW: attIntervalNs,
		cells: make([]buckets.Cell, 0, buckets.ExactCells)}
	if att != nil {
		x.attN = attRetentionNs/attIntervalNs + 1
	}
	for k := range x.acked {
		x.acked[k] = map[int64]uint64{}
	}
	x.attAcked = map[int64]uint64{}
	return x, nil
}

// Next returns a delta holding every bucket that ends at or before
// closedBeforeNs and changed since the last acknowledged delta; ok is false
// when there is nothing to send. Until Ack confirms it, the same buckets
// are sent again by the next call (with a higher Seq).
func (x *Exporter) Next(closedBeforeNs int64) (Delta, bool) {
	d := Delta{Router: x.router, Epoch: x.epoch, WidthNs: x.demand.Arrivals.WidthNs(), AttainmentWidthNs: x.attW}
	for k := range buckets.NumKinds {
		x.pending[k] = map[int64]uint64{}
		h := x.demand.History(k)
		newestNs, ok := h.NewestNs()
		if !ok {
			continue
		}
		w := h.WidthNs()
		hi := min(newestNs/w, closedBeforeNs/w-1)
		lo := max(newestNs/w-(h.RetentionBuckets()-1), 0)
		for e := lo; e <= hi; e++ {
			b := x.readDemand(h, k, e*w)
			sum := hashDemand(&b)
			prev, sent := x.acked[k][b.StartNs]
			if (!sent && b.empty()) || (sent && prev == sum) {
				continue
			}
			d.Demand = append(d.Demand, b)
			x.pending[k][b.StartNs] = sum
		}
	}
	x.attPending = map[int64]uint64{}
	if x.att != nil {
		hi := closedBeforeNs/x.attW - 1
		for e := max(hi-x.attN+1, 0); e <= hi; e++ {
			win := x.att.Window(e*x.attW, e*x.attW)
			b := AttainmentBucket{StartNs: e * x.attW, ByOutcome: win.ByOutcome}
			sum := hashAtt(&b)
			prev, sent := x.attAcked[b.StartNs]
			if (!sent && b.empty()) || (sent && prev == sum) {
				continue
			}
			d.Attainment = append(d.Attainment, b)
			x.attPending[b.StartNs] = sum
		}
	}
	if len(d.Demand) == 0 && len(d.Attainment) == 0 {
		return Delta{}, false
	}
	x.seq++
	d.Seq = x.seq
	x.pendingSeq = d.Seq
	return d, true
}

// Ack records that the delta with sequence seq reached the leader. Acks
// of any other sequence than the latest delta's are ignored.
func (x *Exporter) Ack(seq uint64) {
	if seq == 0 || seq != x.pendingSeq {
		return
	}
	for k := range x.pending {
		for start, sum := range x.pending[k] {
			x.acked[k][start] = sum
		}
		x.pending[k] = nil
		// Forget buckets the history no longer retains.
		h := x.demand.History(buckets.Kind(k))
		if newestNs, ok := h.NewestNs(); ok {
			oldest := newestNs - (h.RetentionBuckets()-1)*h.WidthNs()
			for start := range x.acked[k] {
				if start < oldest {
					delete(x.acked[k], start)
				}
			}
		}
	}
	for start, sum := range x.attPending {
		x.attAcked[start] = sum
	}
	if len(x.attAcked) > int(x.attN) {
		newest := int64(-1)
		for start := range x.attAcked {
			newest = max(newest, start)
		}
		for start := range x.attAcked {
			if start <= newest-x.attN*x.attW {
				delete(x.attAcked, start)
			}
		}
	}
	x.attPending = nil
	x.pendingSeq = 0
}

// Heartbeat returns a delta without buckets (its own sequence number): it
// lets a router learn the receiving store's instance when it has nothing
// new to send. It leaves any pending delta pending.
func (x *Exporter) Heartbeat() Delta {
	x.seq++
	return Delta{Router: x.router, Epoch: x.epoch, Seq: x.seq, WidthNs: x.demand.Arrivals.WidthNs(), AttainmentWidthNs: x.attW}
}

// Reset forgets what was acknowledged, so the next delta carries every
// retained closed bucket: call it when the receiving store changed (a new
// leader starts with an empty store).
func (x *Exporter) Reset() {
	for k := range x.acked {
		clear(x.acked[k])
	}
	clear(x.attAcked)
	x.pendingSeq = 0
}

// readDemand snapshots one bucket through the history's public window
// query: a window of one bucket.
func (x *Exporter) readDemand(h *buckets.History, k buckets.Kind, startNs int64) DemandBucket {
	cells, win := h.Window(startNs, startNs, x.cells[:0])
	x.cells = cells[:0]
	slices.SortFunc(cells, func(a, b buckets.Cell) int { return compareShape(a.Shape, b.Shape) })
	b := DemandBucket{Kind: k, StartNs: startNs, Overflow: win.Overflow, Unsized: win.Unsized, Invalid: win.InvalidBuckets > 0}
	if len(cells) > 0 {
		b.Cells = make([][3]int64, 0, len(cells))
		for _, c := range cells {
			if c.Count > 0 {
				b.Cells = append(b.Cells, [3]int64{c.Shape.Input, c.Shape.Output, c.Count})
			}
		}
	}
	return b
}

func hashDemand(b *DemandBucket) uint64 {
	h := fnv.New64a()
	var buf [8]byte
	put := func(v int64) {
		for i := range buf {
			buf[i] = byte(uint64(v) >> (8 * i))
		}
		h.Write(buf[:])
	}
	for _, c := range b.Cells {
		put(c[0])
		put(c[1])
		put(c[2])
	}
	o := b.Overflow
	put(o.Count)
	put(o.MaxInput)
	put(o.MaxOutput)
	put(b.Unsized)
	flags := int64(0)
	if o.ZeroOutput {
		flags |= 1
	}
	if b.Invalid {
		flags |= 2
	}
	put(flags)
	return h.Sum64()
}

func hashAtt(b *AttainmentBucket) uint64 {
	h := fnv.New64a()
	var buf [8]byte
	for _, c := range b.ByOutcome {
		for _, v := range [3]int64{c.Total, c.TTFTMet, c.TPOTMet} {
			for i := range buf {
				buf[i] = byte(uint64(v) >> (8 * i))
			}
			h.Write(buf[:])
		}
	}
	return h.Sum64()
}
