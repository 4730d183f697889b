package extproc

import (
	"context"
	"errors"
	"net"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/narwhal-io/narwhal/service"
)

// ServiceOption serves cfg's extproc.listen beside narwhal-core's API
// (service.WithSidecar); it does nothing when extproc.listen is empty.
// The gRPC server holds at most extproc.max_connections connections and
// extproc.max_streams streams on each, takes messages up to
// extproc.max_message_bytes, the handshake within
// http.read_header_timeout_s, pings an idle peer every 30 s (dead after
// 10 s without an answer), and speaks TLS with the API's certificate
// when it has one. Streams last at most events.max_request_s; token
// counts above events.max_tokens are not used.
func ServiceOption(cfg service.Config) service.Option {
	if cfg.ExtProc.Listen == "" {
		return func(*service.Server) {}
	}
	refused := prometheus.NewCounter(prometheus.CounterOpts{Name: "narwhal_extproc_connections_refused_total",
		Help: "ext_proc connections closed at once because extproc.max_connections were open."})
	return service.WithSidecar(service.Sidecar{
		Setting: "extproc.listen", Addr: cfg.ExtProc.Listen, MaxConnections: cfg.ExtProc.MaxConnections,
		ConnectionsRefused: refused,
		Build: func(env service.SidecarEnv) (service.SidecarServer, []prometheus.Collector, error) {
			p := New(env.Sink, Options{Now: env.Now, Authorize: env.RouterAuth, Logger: env.Logger,
				MaxStream: time.Duration(cfg.Events.MaxRequestS * float64(time.Second)), MaxTokens: cfg.Events.MaxTokens})
			opts := []grpc.ServerOption{
				grpc.MaxConcurrentStreams(uint32(cfg.ExtProc.MaxStreams)),
				grpc.MaxRecvMsgSize(int(cfg.ExtProc.MaxMessageBytes)),
				grpc.ConnectionTimeout(time.Duration(cfg.HTTP.ReadHeaderTimeoutS * float64(time.Second))),
				grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
				grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
			}
			if env.TLS != nil {
				opts = append(opts, grpc.Creds(credentials.NewTLS(env.TLS)))
			}
			g := grpc.NewServer(opts...)
			extprocv3.RegisterExternalProcessorServer(g, p)
			return &grpcSidecar{g: g, p: p}, p.Collectors(), nil
		},
	})
}

// grpcSidecar runs a Processor's gRPC server as a service sidecar.
type grpcSidecar struct {
	g *grpc.Server
	p *Processor
}

func (s *grpcSidecar) Serve(ln net.Listener) error {
	if err := s.g.Serve(ln); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}

// Stop lets the streams (HTTP requests in flight through the gateway)
// end until ctx does, then cuts the rest without reporting them: their
// clients did not go away.
func (s *grpcSidecar) Stop(ctx context.Context) {
	done := make(chan struct{})
	go func() { s.g.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		s.p.Quiet()
		s.g.Stop()
		<-done
	}
}
