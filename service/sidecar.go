package service

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Sidecar is a server run beside the API on a listener of its own (the
// ext_proc gRPC server, package service/extproc, which keeps gRPC out of
// this package and of the fuzz targets built over it). The Server binds
// Addr in New, holding at most MaxConnections open (one beyond is closed at
// once, counted in ConnectionsRefused when not nil), registers what Build
// returns on /metrics, serves it in Serve and stops it with the API.
type Sidecar struct {
	// Setting is the listen setting (e.g. "extproc.listen"): it names the
	// sidecar in errors, logs and connection refusals.
	Setting            string
	Addr               string
	MaxConnections     int64
	ConnectionsRefused prometheus.Counter
	// Build makes the server from what the Server lends it.
	Build func(SidecarEnv) (SidecarServer, []prometheus.Collector, error)
}

// SidecarServer is what Build makes.
type SidecarServer interface {
	// Serve serves ln until Stop; it returns nil once stopped.
	Serve(ln net.Listener) error
	// Stop ends the server: gracefully until ctx ends (the API's
	// http.shutdown_timeout_s), then at once. Serve has returned when it
	// returns.
	Stop(ctx context.Context)
}

// SidecarEnv is what the Server lends a sidecar.
type SidecarEnv struct {
	// Sink is the core the API's events go to.
	Sink EventSink
	// Now is the Server's clock (the core's).
	Now func() int64
	// RouterAuth judges an Authorization value ("Bearer <token>") against
	// the routers' tokens, as POST /v1/events does (reloaded with
	// auth.token_file).
	RouterAuth func(authorization string) error
	// TLS serves the API's certificate (reloaded with tls.reload_s); nil
	// without tls.cert_file.
	TLS    *tls.Config
	Logger *slog.Logger
}

// sidecar is a Sidecar with its server and listener.
type sidecar struct {
	Sidecar
	srv SidecarServer
	ln  net.Listener
}

// limitName names the connection limit: extproc.listen's is
// extproc.max_connections.
func (sc *sidecar) limitName() string {
	prefix, _, _ := strings.Cut(sc.Setting, ".")
	return prefix + ".max_connections"
}

// WithSidecar runs sc beside the API (see Sidecar).
func WithSidecar(sc Sidecar) Option {
	return func(s *Server) { s.sidecars = append(s.sidecars, &sidecar{Sidecar: sc}) }
}

func (s *Server) hasSidecar(setting string) bool {
	for _, sc := range s.sidecars {
		if sc.Setting == setting {
			return true
		}
	}
	return false
}

// SidecarAddr is the address of the sidecar named by its listen setting,
// nil when there is none.
func (s *Server) SidecarAddr(setting string) net.Addr {
	for _, sc := range s.sidecars {
		if sc.Setting == setting && sc.ln != nil {
			return sc.ln.Addr()
		}
	}
	return nil
}
