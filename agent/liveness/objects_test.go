package liveness

import (
	"encoding/binary"
	"testing"

	"github.com/cilium/ebpf"
)

// Both committed objects (little- and big-endian, for the architectures
// bpf2go's build tags pick) come from the same source: same programs, same
// map layouts, each in its own byte order. A stale one after an edit of
// bpf/liveness.c fails here.
func TestCommittedObjectsMatch(t *testing.T) {
	el, err := ebpf.LoadCollectionSpec("liveness_bpfel.o")
	if err != nil {
		t.Fatal(err)
	}
	eb, err := ebpf.LoadCollectionSpec("liveness_bpfeb.o")
	if err != nil {
		t.Fatal(err)
	}
	if el.ByteOrder != binary.LittleEndian || eb.ByteOrder != binary.BigEndian {
		t.Fatalf("byte orders %v / %v; want little / big", el.ByteOrder, eb.ByteOrder)
	}
	for _, name := range []string{"on_exit", "on_sock_state"} {
		pl, pb := el.Programs[name], eb.Programs[name]
		if pl == nil || pb == nil {
			t.Fatalf("program %s: little %v, big %v", name, pl != nil, pb != nil)
		}
		if len(pl.Instructions) != len(pb.Instructions) {
			t.Fatalf("program %s: %d instructions little-endian, %d big-endian", name, len(pl.Instructions), len(pb.Instructions))
		}
	}
	for _, name := range []string{"watched_pids", "watched_ports", "cfg", "events"} {
		ml, mb := el.Maps[name], eb.Maps[name]
		if ml == nil || mb == nil {
			t.Fatalf("map %s: little %v, big %v", name, ml != nil, mb != nil)
		}
		if ml.Type != mb.Type || ml.KeySize != mb.KeySize || ml.ValueSize != mb.ValueSize || ml.MaxEntries != mb.MaxEntries {
			t.Fatalf("map %s differs: %+v vs %+v", name, ml, mb)
		}
	}
	if k := el.Maps["watched_ports"].KeySize; k != 8 {
		t.Fatalf("watched_ports key is %d bytes; want 8 (namespace + port + pad)", k)
	}
}
