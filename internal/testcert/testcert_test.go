package testcert

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"testing"
	"time"
)

// A CA's server certificate verifies for 127.0.0.1 against the CA and not
// against another CA; a self-signed one carries its serial and expiry and
// loads as a key pair.
func TestCertificates(t *testing.T) {
	ca, err := NewCA()
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewCA()
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := Server(ca, 7, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	verify := func(roots []byte) error {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(roots)
		_, err := pair.Leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "127.0.0.1"})
		return err
	}
	if err := verify(ca.PEM); err != nil {
		t.Fatalf("against its CA: %v", err)
	}
	if err := verify(other.PEM); err == nil {
		t.Fatal("verified against another CA")
	}
	exp := time.Now().Add(48 * time.Hour).Truncate(time.Second)
	self, _, err := Server(nil, 9, exp)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(self)
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil || c.SerialNumber.Int64() != 9 || !c.NotAfter.Equal(exp) || c.Issuer.CommonName != c.Subject.CommonName {
		t.Fatalf("self-signed: %v serial %v not after %v issuer %q", err, c.SerialNumber, c.NotAfter, c.Issuer.CommonName)
	}
}
