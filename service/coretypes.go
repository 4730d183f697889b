package service

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/prometheus/client_golang/prometheus"

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
	JournalFile = controller.JournalActive
	StateFile   = controller.StateCheckpoint
)

// DurableCore is the facade with its data directory: the journal
// (write-ahead log and state checkpoint) whose health gates /readyz and
// whose metrics /metrics shows. Journal is nil without a data directory.
type DurableCore struct {
	*core.Core
	Journal *controller.Journal
}

// UpsertEngines registers several engines with one role-table rebuild
// (the fleet registry batches a snapshot's new engines).
func (d *DurableCore) UpsertEngines(es []controller.Engine) error {
	return d.Controller().UpsertEngines(es)
}

// JournalHealth is nil while journal writes and state checkpoints
// succeed (always nil without a data directory).
func (d *DurableCore) JournalHealth() error {
	if d.Journal == nil {
		return nil
	}
	return d.Journal.Healthy()
}

// JournalCollectors are the journal's metrics (none without a data
// directory).
func (d *DurableCore) JournalCollectors() []prometheus.Collector {
	if d.Journal == nil {
		return nil
	}
	return d.Journal.Collectors()
}

// NewCore builds the facade from cfg.Core. With a data directory it opens
// the journal there (controller.OpenJournal: torn tail cut, state.json
// checkpoint validated, records after it replayed), restores the recovered
// state (so roles, cooldown and dwell survive any crash) and seeds the
// in-memory journal, so sequence numbers and GET /v1/decisions continue.
// Without one the core is a dry run kept in memory. The extra options
// (e.g. kube.Replica.CoreOptions) are applied last. profiles.file's profiles come
// before the built-in ones; the geometry prior prices the rest.
func NewCore(cfg Config, logger *slog.Logger, extra ...core.Option) (*DurableCore, error) {
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
	if cfg.DataDir == "" {
		c, err := core.New(cfg.Core, append(opts, extra...)...)
		if err != nil {
			return nil, fmt.Errorf("service: %w", err)
		}
		return &DurableCore{Core: c}, nil
	}
	if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
		return nil, fmt.Errorf("service: data_dir: %w", err)
	}
	jo := cfg.Journal.options(cfg.Core.Controller.JournalRing, logger.With("component", "journal"))
	if journalFS != nil {
		jo.FS = journalFS
	}
	j, rec, err := controller.OpenJournal(cfg.DataDir, jo)
	if err != nil {
		return nil, fmt.Errorf("service: data_dir %s: %w", cfg.DataDir, err)
	}
	logger.Info("journal recovered", "seq", rec.State.Seq, "from_checkpoint", rec.FromCheckpoint,
		"replayed", rec.Replayed, "truncated_bytes", rec.Truncated, "engines", len(rec.State.Engines))
	opts = append(opts, core.WithJournalSink(j))
	if len(rec.History) > 0 {
		opts = append(opts, core.WithJournalHistory(rec.History))
	}
	c, err := core.New(cfg.Core, append(opts, extra...)...)
	if err != nil {
		_ = j.Close()
		return nil, fmt.Errorf("service: %w", err)
	}
	if rec.State.Seq > 0 || rec.FromCheckpoint {
		if err := c.Controller().Restore(rec.State); err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("service: restore: %w", err)
		}
	}
	j.SetStateSource(c.Controller().State)
	return &DurableCore{Core: c, Journal: j}, nil
}

// journalFS replaces the journal's file layer (crash tests slow it down).
var journalFS controller.FS
