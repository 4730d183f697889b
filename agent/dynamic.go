package agent

import (
	"fmt"

	"github.com/narwhal-io/narwhal/agent/engine"
	"github.com/narwhal-io/narwhal/agent/liveness"
	"github.com/narwhal-io/narwhal/core/controller"
	"github.com/prometheus/client_golang/prometheus"
)

// SetEngines replaces the engine list (engine discovery on Kubernetes,
// agent/kubediscover). An engine whose id stays keeps what the agent knew
// of it (last metrics, liveness); its liveness watches move with a changed
// PID or port. The list is validated as the configuration's engines are;
// a refused list changes nothing. A hello with the new list is queued.
func (a *Agent) SetEngines(list []EngineConfig) error {
	check := a.cfg
	check.Engines = list
	if err := check.Validate(); err != nil {
		return fmt.Errorf("agent: engine list refused: %w", err)
	}
	a.mu.Lock()
	old := map[string]*engineState{}
	for _, e := range a.engines {
		old[e.cfg.ID] = e
	}
	a.cfg.Engines = list
	var (
		engines               []*engineState
		unwatchPID, watchPID  []int32
		unwatchSock, watchSck []liveness.Socket
	)
	byPID, byPort := map[int32]*engineState{}, map[liveness.Socket]*engineState{}
	for _, c := range list {
		if c.Node != "" && c.Node != a.cfg.Node {
			continue
		}
		st := old[c.ID]
		if st == nil {
			r, _ := controller.ParseRole(c.Role)
			st = &engineState{role: r, metrics: engine.Metrics{Running: -1, Waiting: -1, KVUsedTokens: -1}}
		} else {
			delete(old, c.ID)
			if r, ok := controller.ParseRole(c.Role); ok {
				st.role = r
			}
			if st.cfg.PID != c.PID && st.cfg.PID > 0 {
				unwatchPID = append(unwatchPID, st.cfg.PID)
			}
		}
		if c.PID > 0 && (st.cfg.PID != c.PID || st.cfg.ID == "") {
			watchPID = append(watchPID, c.PID)
		}
		prevSock := st.sock
		st.cfg, st.sock = c, liveness.Socket{}
		if c.PID > 0 {
			byPID[c.PID] = st
		}
		if c.Port > 0 {
			if sock, ok := a.socketOf(c); ok {
				st.sock = sock
				byPort[sock] = st
			}
		}
		if prevSock != st.sock {
			if prevSock.Port > 0 {
				unwatchSock = append(unwatchSock, prevSock)
			}
			if st.sock.Port > 0 {
				watchSck = append(watchSck, st.sock)
			}
		}
		engines = append(engines, st)
	}
	for _, gone := range old {
		if gone.cfg.PID > 0 {
			unwatchPID = append(unwatchPID, gone.cfg.PID)
		}
		if gone.sock.Port > 0 {
			unwatchSock = append(unwatchSock, gone.sock)
		}
		a.kvTokens.DeleteLabelValues(gone.cfg.ID)
		a.kvCap.DeleteLabelValues(gone.cfg.ID)
		a.kvDisagr.DeleteLabelValues(gone.cfg.ID)
		a.backlogS.DeletePartialMatch(prometheus.Labels{"engine": gone.cfg.ID})
		a.priced.DeleteLabelValues(gone.cfg.ID)
		a.scrapes.DeletePartialMatch(prometheus.Labels{"engine": gone.cfg.ID})
	}
	a.engines, a.byPID, a.byPort = engines, byPID, byPort
	w := a.watcher
	a.mu.Unlock()
	if w != nil {
		for _, p := range unwatchPID {
			_ = w.UnwatchPID(p)
		}
		for _, s := range unwatchSock {
			_ = w.UnwatchPort(s)
		}
		for _, p := range watchPID {
			if err := w.WatchPID(p); err != nil {
				a.log.Warn("cannot watch engine pid", "pid", p, "err", err)
			}
		}
		for _, s := range watchSck {
			if err := w.WatchPort(s); err != nil {
				a.log.Warn("cannot watch engine port", "port", s.Port, "err", err)
			}
		}
	}
	if a.stream != nil {
		a.stream.EnqueueHello()
	}
	return nil
}
