package service

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/narwhal-io/narwhal/core"
	"github.com/narwhal-io/narwhal/core/controller"
	"github.com/narwhal-io/narwhal/core/profile"
)

// The facade's introspection types, named once so that the Core interface
// matches *core.Core exactly. The service only encodes them as JSON.
type (
	roleTable  = controller.RoleTable
	decision   = controller.Decision
	coreState  = core.State
	coreConfig = core.Config
)

func defaultCoreConfig() coreConfig { return core.DefaultConfig() }

// *core.Core is the production Core.
var _ Core = (*core.Core)(nil)

// Data directory file names.
const (
	JournalFile = "journal.jsonl"
	StateFile   = "state.json"
)

// NewCore builds the facade from cfg.Core. With a data directory it
// appends decisions to DataDir/journal.jsonl (and reloads its tail, so
// sequence numbers and GET /v1/decisions continue across restarts) and
// saves the controller state to DataDir/state.json after every step
// (restored here, so cooldown and dwell survive a restart). Without one the
// core is a dry run kept in memory. The extra options (e.g.
// Kube.CoreOptions) are applied last. profiles.file's profiles come
// before the built-in ones; the geometry prior prices the rest.
func NewCore(cfg Config, logger *slog.Logger, extra ...core.Option) (*core.Core, error) {
	opts := []core.Option{core.WithLogger(logger)}
	cfg.Core.PendingTimeoutS = cfg.Events.PendingTimeoutS
	if cfg.Core.PendingTimeoutS == 0 {
		cfg.Core.PendingTimeoutS = cfg.HTTP.ReadTimeoutS
	}
	if cfg.Profiles.File != "" {
		set, err := profile.LoadFile(cfg.Profiles.File)
		if err != nil {
			return nil, fmt.Errorf("service: profiles.file: %w", err)
		}
		// The file's profiles first: they take precedence in lookups.
		merged, err := controller.NewProfileSet(append(set.Profiles, controller.BuiltinProfiles().Profiles...)...)
		if err != nil {
			return nil, fmt.Errorf("service: profiles.file: %w", err)
		}
		opts = append(opts, core.WithProfiles(merged))
	}
	if cfg.DataDir != "" {
		if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
			return nil, fmt.Errorf("service: data_dir: %w", err)
		}
		journal := filepath.Join(cfg.DataDir, JournalFile)
		history, err := controller.LoadJournal(journal, cfg.Core.Controller.JournalRing)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("service: %w", err)
		}
		sink, err := controller.NewJSONLinesSink(journal)
		if err != nil {
			return nil, fmt.Errorf("service: %w", err)
		}
		opts = append(opts, core.WithJournalSink(sink), core.WithStateFile(filepath.Join(cfg.DataDir, StateFile)))
		if len(history) > 0 {
			opts = append(opts, core.WithJournalHistory(history))
		}
		c, err := core.New(cfg.Core, append(opts, extra...)...)
		if err != nil {
			_ = sink.Close()
			return nil, fmt.Errorf("service: %w", err)
		}
		return c, nil
	}
	c, err := core.New(cfg.Core, append(opts, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("service: %w", err)
	}
	return c, nil
}
