package syncbuf

import (
	"fmt"
	"sync"
	"testing"
)

// Writers and a reader run at once (go test -race checks the locking);
// every write lands whole.
func TestConcurrentWritesAndReads(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				fmt.Fprintf(&b, "line %d\n", i)
				_ = b.String()
			}
		}()
	}
	wg.Wait()
	if n := b.Count("line "); n != 400 {
		t.Fatalf("%d lines; want 400", n)
	}
	if n := b.Count("line 99\n"); n != 4 {
		t.Fatalf("%d of line 99; want 4", n)
	}
}
