package service

import (
	"net/http"

	"github.com/narwhal-io/narwhal/core/controller"
	"github.com/narwhal-io/narwhal/service/ui"
)

// addStatusPage builds the status page (package ui) and its sampler loop.
func (s *Server) addStatusPage() {
	s.page = ui.New(s.core, s.now)
	s.loops = append(s.loops, namedLoop{"status page sampler", s.page.Run})
}

// rootHandler serves the status page at exactly "/" and answers 404 (JSON)
// for every path no other route takes.
func (s *Server) rootHandler() http.Handler {
	page := s.metrics.instrument("ui", getOnly(s.page.Handler().ServeHTTP))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/" {
			page.ServeHTTP(w, r)
			return
		}
		writeJSON(w, http.StatusNotFound, errorReply{"no such endpoint: " + r.URL.Path})
	})
}

// newestDecider is the optional Core method behind /v1/decisions without
// since (*core.Core has it).
type newestDecider interface {
	NewestDecisions(limit int) []decision
}

// decisions answers GET /v1/decisions: with since, up to limit decisions
// after that sequence number, oldest first (to page forward); without it,
// the newest limit decisions, oldest first.
func (s *Server) decisions(hasSince bool, since uint64, limit int) []decision {
	var ds []decision
	switch nd, ok := s.core.(newestDecider); {
	case hasSince:
		ds = s.core.Decisions(since, limit)
	case ok:
		ds = nd.NewestDecisions(limit)
	default:
		if ds = s.core.Decisions(0, 0); len(ds) > limit {
			ds = ds[len(ds)-limit:]
		}
	}
	if ds == nil {
		ds = []decision{}
	}
	return ds
}

// state is GET /v1/state: lists are [] rather than null when empty.
func (s *Server) state() coreState {
	st := s.core.State(s.now())
	if st.Engines == nil {
		st.Engines = []controller.Engine{}
	}
	if st.Roles != nil && (st.Roles.Prefill == nil || st.Roles.Decode == nil) {
		rt := *st.Roles
		if rt.Prefill == nil {
			rt.Prefill = []string{}
		}
		if rt.Decode == nil {
			rt.Decode = []string{}
		}
		st.Roles = &rt
	}
	return st
}
