package service

import "net"

// WithListener serves the API on ln instead of binding http.listen (the
// address must then be ln's): a caller that must know the port is free
// before doing anything slow binds first (the demo). New takes ln over
// when it succeeds; on error the caller closes it.
func WithListener(ln net.Listener) Option { return func(s *Server) { s.apiLn = ln } }
