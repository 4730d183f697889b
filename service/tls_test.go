package service

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/narwhal-io/narwhal/internal/testcert"
)

// With tls.cert_file and tls.key_file the API listener speaks only TLS.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	certPEM, keyPEM := selfSigned(t, 1, time.Now().Add(time.Hour))
	cfg := testConfig()
	cfg.TLS.CertFile, cfg.TLS.KeyFile = filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	for f, b := range map[string]string{cfg.TLS.CertFile: certPEM, cfg.TLS.KeyFile: keyPEM} {
		if err := os.WriteFile(f, []byte(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s, err := New(cfg, newFakeCore(), nil, WithoutControlLoop())
	if err != nil {
		t.Fatal(err)
	}
	serving(t, s)

	block, _ := pem.Decode([]byte(certPEM))
	der := block.Bytes
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 5 * time.Second}
	resp, err := client.Get("https://" + s.Addr().String() + "/healthz")
	if err != nil {
		t.Fatalf("GET over TLS: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET over TLS: got %d; want 200", resp.StatusCode)
	}
	plain := &http.Client{Timeout: 5 * time.Second}
	if resp, err := plain.Get("http://" + s.Addr().String() + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Fatal("plain HTTP answered 200 on a TLS listener")
		}
	}
}

// selfSigned is a self-signed PEM certificate for 127.0.0.1 with the
// given serial and its PEM key.
func selfSigned(t *testing.T, serial int64, notAfter time.Time) (certPEM, keyPEM string) {
	t.Helper()
	c, k, err := testcert.Server(nil, serial, notAfter)
	if err != nil {
		t.Fatal(err)
	}
	return string(c), string(k)
}

// A certificate renewed into its Secret (cert-manager) is served to new
// connections without a restart; a pair whose key does not match keeps
// the one served before and is counted. The expiry gauge follows the
// served certificate.
func TestTLSCertificateRenewedWithoutRestart(t *testing.T) {
	expA, expB := time.Now().Add(48*time.Hour).Truncate(time.Second), time.Now().Add(90*24*time.Hour).Truncate(time.Second)
	certA, keyA := selfSigned(t, 1, expA)
	certB, keyB := selfSigned(t, 2, expB)
	certC, _ := selfSigned(t, 3, expB)
	d := newSecretFiles(t, map[string]string{"tls.crt": certA, "tls.key": keyA})
	cfg := testConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.TLS.CertFile, cfg.TLS.KeyFile, cfg.TLS.ReloadS = d.file("tls.crt"), d.file("tls.key"), 0.01
	s, err := New(cfg, newFakeCore(), nil, WithoutControlLoop())
	if err != nil {
		t.Fatal(err)
	}
	serving(t, s)

	// served is the serial of the certificate a new connection is shown.
	served := func() int64 {
		t.Helper()
		conn, err := tls.Dial("tcp", s.Addr().String(), &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			t.Fatalf("TLS dial: %v", err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
	}
	notAfter := func() float64 {
		t.Helper()
		_, body := get(t, s.Handler(), "/metrics")
		for _, line := range strings.Split(body, "\n") {
			if v, ok := strings.CutPrefix(line, "narwhal_tls_certificate_not_after_seconds "); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					t.Fatal(err)
				}
				return f
			}
		}
		t.Fatal("no narwhal_tls_certificate_not_after_seconds on /metrics")
		return 0
	}
	if got := served(); got != 1 {
		t.Fatalf("at start: serial %d served, want 1", got)
	}
	if got := notAfter(); got != float64(expA.Unix()) {
		t.Fatalf("not_after %v, want %d", got, expA.Unix())
	}
	d.updateFiles(map[string]string{"tls.crt": certB, "tls.key": keyB})
	eventually(t, "the renewed certificate served", func() bool { return served() == 2 })
	if got := notAfter(); got != float64(expB.Unix()) {
		t.Fatalf("after renewal: not_after %v, want %d", got, expB.Unix())
	}
	d.updateFiles(map[string]string{"tls.crt": certC, "tls.key": keyB}) // the key is not C's
	eventually(t, "the mismatched pair counted", func() bool {
		return testutil.ToFloat64(s.certs.reloads.WithLabelValues("error")) >= 1
	})
	if got := served(); got != 2 {
		t.Fatalf("after a mismatched pair: serial %d served, want 2 kept", got)
	}
	if got := testutil.ToFloat64(s.certs.reloads.WithLabelValues("ok")); got != 1 {
		t.Fatalf("ok reloads %v, want 1", got)
	}
}
