package service

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// With tls.cert_file and tls.key_file the API listener speaks only TLS.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "narwhal-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	cfg := testConfig()
	cfg.TLS.CertFile, cfg.TLS.KeyFile = filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	os.WriteFile(cfg.TLS.CertFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(cfg.TLS.KeyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	s, err := New(cfg, newFakeCore(), nil, WithoutControlLoop())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	defer func() { cancel(); <-done }()

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

// selfSigned is a PEM certificate for 127.0.0.1 with the given serial
// and its PEM key.
func selfSigned(t *testing.T, serial int64, notAfter time.Time) (certPEM, keyPEM string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "narwhal-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: notAfter,
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}))
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
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	defer func() { cancel(); <-done }()

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
	eventually := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); {
			if time.Now().After(deadline) {
				t.Fatalf("not within 10 s: %s", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if got := served(); got != 1 {
		t.Fatalf("at start: serial %d served, want 1", got)
	}
	if got := notAfter(); got != float64(expA.Unix()) {
		t.Fatalf("not_after %v, want %d", got, expA.Unix())
	}
	d.updateFiles(map[string]string{"tls.crt": certB, "tls.key": keyB})
	eventually("the renewed certificate served", func() bool { return served() == 2 })
	if got := notAfter(); got != float64(expB.Unix()) {
		t.Fatalf("after renewal: not_after %v, want %d", got, expB.Unix())
	}
	d.updateFiles(map[string]string{"tls.crt": certC, "tls.key": keyB}) // the key is not C's
	eventually("the mismatched pair counted", func() bool {
		return testutil.ToFloat64(s.certs.reloads.WithLabelValues("error")) >= 1
	})
	if got := served(); got != 2 {
		t.Fatalf("after a mismatched pair: serial %d served, want 2 kept", got)
	}
	if got := testutil.ToFloat64(s.certs.reloads.WithLabelValues("ok")); got != 1 {
		t.Fatalf("ok reloads %v, want 1", got)
	}
}
