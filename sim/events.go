package sim

// event kinds
const (
	evArrival uint8 = iota
	evTokenized
	evPrefillDone
	evTransferDone
	evStepDone
	evSwitchDone
	evTick
	evClientTimeout
)

// event is a value in the heap; eng and req index the simulator's slices.
type event struct {
	t    int64
	seq  uint64 // insertion order breaks ties: deterministic
	kind uint8
	eng  int32
	req  int32
}

// eventHeap is a binary min-heap on (t, seq) of values: pushing and popping
// do not allocate once the backing array has grown.
type eventHeap struct{ a []event }

func (h *eventHeap) less(i, j int) bool {
	if h.a[i].t != h.a[j].t {
		return h.a[i].t < h.a[j].t
	}
	return h.a[i].seq < h.a[j].seq
}

func (h *eventHeap) push(e event) {
	h.a = append(h.a, e)
	i := len(h.a) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(i, p) {
			break
		}
		h.a[i], h.a[p] = h.a[p], h.a[i]
		i = p
	}
}

func (h *eventHeap) pop() event {
	top := h.a[0]
	n := len(h.a) - 1
	h.a[0] = h.a[n]
	h.a = h.a[:n]
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && h.less(r, l) {
			m = r
		}
		if !h.less(m, i) {
			break
		}
		h.a[i], h.a[m] = h.a[m], h.a[i]
		i = m
	}
	return top
}

func (h *eventHeap) len() int { return len(h.a) }
