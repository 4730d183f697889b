package buckettest

import "fmt"

// Dump is a debugging aid.
func (m *HistoryModel) Dump() string {
	s := fmt.Sprintf("newest %d first %d keep %d:", m.c.newest, m.c.first, m.c.keep)
	for e, b := range m.b {
		s += fmt.Sprintf(" %d:%d", e, b.sized())
	}
	return s
}
