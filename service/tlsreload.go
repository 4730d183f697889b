package service

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// The API listener's certificate follows its files. cert-manager renews
// a certificate into the same Secret well before it expires, and the
// kubelet updates the mounted files in place; a key pair read once at
// start would be served until it expired and every router's and agent's
// handshake failed. The pair is read again every tls.reload_s; a pair
// that does not load (a key that does not match, a half-written file)
// keeps the one served before, logged once per change and counted in
// narwhal_tls_reloads_total{result="error"}.
// narwhal_tls_certificate_not_after_seconds is the served leaf's expiry.

// maxPEMBytes bounds what a reload reads of each file.
const maxPEMBytes = 1 << 20

type certSource struct {
	certFile, keyFile string
	cur               atomic.Pointer[tls.Certificate]
	log               *slog.Logger

	mu           sync.Mutex // one reload at a time; rawCert, rawKey, lastErr
	rawCert      []byte
	rawKey       []byte
	lastErr      string
	reloads      *prometheus.CounterVec
	notAfterDesc *prometheus.Desc
}

func readPEM(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxPEMBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxPEMBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxPEMBytes)
	}
	return b, nil
}

// loadPair reads and parses the pair.
func loadPair(certFile, keyFile string) (cert, key []byte, pair *tls.Certificate, err error) {
	if cert, err = readPEM(certFile); err != nil {
		return nil, nil, nil, err
	}
	if key, err = readPEM(keyFile); err != nil {
		return nil, nil, nil, err
	}
	p, err := tls.X509KeyPair(cert, key)
	if err != nil {
		return nil, nil, nil, err
	}
	return cert, key, &p, nil
}

// newCertSource loads the pair; an error stops the start.
func newCertSource(certFile, keyFile string, logger *slog.Logger) (*certSource, error) {
	cert, key, pair, err := loadPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("service: loading TLS key pair: %w", err)
	}
	s := &certSource{certFile: certFile, keyFile: keyFile, log: logger, rawCert: cert, rawKey: key,
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "narwhal_tls_reloads_total",
			Help: "TLS key pairs read again after tls.cert_file or tls.key_file changed, by result (ok; error: the pair served before stays)."},
			[]string{"result"}),
		notAfterDesc: prometheus.NewDesc("narwhal_tls_certificate_not_after_seconds",
			"When the certificate the API listener serves expires (Unix seconds).", nil, nil)}
	s.cur.Store(pair)
	return s, nil
}

// getCertificate is tls.Config.GetCertificate.
func (s *certSource) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return s.cur.Load(), nil
}

// reload reads both files again and serves a changed pair that loads.
func (s *certSource) reload() (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fail := func(err error) (bool, error) {
		err = fmt.Errorf("tls.cert_file %q, tls.key_file %q: %w; the pair served before stays", s.certFile, s.keyFile, err)
		s.reloads.WithLabelValues("error").Inc()
		if msg := err.Error(); msg != s.lastErr {
			s.lastErr = msg
			s.log.Error("TLS key pair not reloaded", "err", err)
		}
		return false, err
	}
	cert, err := readPEM(s.certFile)
	if err != nil {
		return fail(err)
	}
	key, err := readPEM(s.keyFile)
	if err != nil {
		return fail(err)
	}
	if bytes.Equal(cert, s.rawCert) && bytes.Equal(key, s.rawKey) {
		s.lastErr = ""
		return false, nil
	}
	pair, err := tls.X509KeyPair(cert, key)
	if err != nil {
		return fail(err)
	}
	s.lastErr = ""
	s.rawCert, s.rawKey = cert, key
	s.cur.Store(&pair)
	s.reloads.WithLabelValues("ok").Inc()
	s.log.Info("TLS key pair reloaded", "not_after", pair.Leaf.NotAfter)
	return true, nil
}

func (s *certSource) Describe(ch chan<- *prometheus.Desc) {
	s.reloads.Describe(ch)
	ch <- s.notAfterDesc
}

func (s *certSource) Collect(ch chan<- prometheus.Metric) {
	s.reloads.Collect(ch)
	if leaf := s.cur.Load().Leaf; leaf != nil {
		ch <- prometheus.MustNewConstMetric(s.notAfterDesc, prometheus.GaugeValue, float64(leaf.NotAfter.Unix()))
	}
}
