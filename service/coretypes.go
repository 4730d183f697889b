package service

import (
	"fmt"
	"github.com/narwhal-io/narwhal/core/controller"
	"log/slog"
)

// The facade's introspection types, named once so that the Core interface
// matches *core.Core exactly. The service only encodes them as JSON.

type roleTable = controller.RoleTable

type decision = controller.Decision

type coreState = map[string]any

// coreConfig is a placeholder until core.Config lands.
type coreConfig struct {
	StepS float64 `yaml:"step_s" json:"step_s"`
}

func defaultCoreConfig() coreConfig { return coreConfig{StepS: 1} }

func (c coreConfig) Validate() error {
	if !(c.StepS > 0) {
		return fmt.Errorf("step_s must be > 0, got %v", c.StepS)
	}
	return nil
}

// NewCore builds the facade from cfg.Core with the data directory's journal
// and state file. Placeholder until the facade lands.
func NewCore(cfg Config, logger *slog.Logger) (Core, error) {
	return nil, fmt.Errorf("service: the core facade is not built yet")
}
