package refdocs

import (
	"fmt"
	"os"
	"path/filepath"
)

// Page is one generated page: its path under the module root and its
// renderer.
type Page struct {
	Path   string
	Render func(root string) ([]byte, error)
}

// Pages are the generated reference pages.
var Pages = []Page{
	{"docs/configuration.md", Configuration},
	{"docs/metrics.md", func(string) ([]byte, error) { return MetricsPage() }},
	{"docs/journal.md", Journal},
	{"docs/agent-configuration.md", AgentConfiguration},
}

// Write renders every page under root.
func Write(root string) error {
	for _, p := range Pages {
		b, err := p.Render(root)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(root, p.Path), b, 0o644); err != nil {
			return fmt.Errorf("refdocs: %w", err)
		}
	}
	return nil
}
