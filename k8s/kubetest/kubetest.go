// Package kubetest starts a real Kubernetes control plane for tests: etcd
// and kube-apiserver (and, on request, kube-controller-manager with its
// replicaset and deployment controllers) on 127.0.0.1, with static token
// authentication, RBAC authorization and service-account token signing on.
//
// The binaries are the upstream ones, built from the k8s.io/kubernetes
// module by the wrapper module k8s/apiserver-build (see its README):
//
//	cd k8s/apiserver-build && go build -o bin/ ./kube-apiserver ./etcd ./kube-controller-manager
//
// They are looked up in $NARWHAL_KUBE_BIN, then k8s/apiserver-build/bin.
// With a binary missing a test skips with a message, except in CI
// (CI=true), where it fails: Main reports the missing binaries and exits 1.
//
// One control plane per test package: Main starts it in TestMain and stops
// it after the package's tests, so each test works in its own namespace.
//
// Choices where the issue is silent:
//   - No scheduler and no kubelet: a test that needs a running pod plays
//     the kubelet itself (sets spec.nodeName at creation and the pod's
//     status through the status subresource).
//   - The ServiceAccount admission plugin is off (no service-account
//     controller creates "default" accounts); service-account tokens are
//     issued through the TokenRequest API.
//   - etcd runs with --unsafe-no-fsync: the data is thrown away.
package kubetest

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// ErrMissing: a control-plane binary was not found.
var ErrMissing = errors.New("kubetest: control-plane binary not found")

// Options selects what to start.
type Options struct {
	// ControllerManager also starts kube-controller-manager running the
	// replicaset and deployment controllers.
	ControllerManager bool
}

type proc struct {
	name   string
	cmd    *exec.Cmd
	exited chan struct{} // closed when the process has exited
	err    error
}

// Server is a running control plane.
type Server struct {
	// URL is the API server's https URL.
	URL string
	// AdminToken authenticates as user "admin" in group system:masters.
	AdminToken string
	dir        string
	procs      []*proc
	logs       []*os.File
	stopOnce   sync.Once
}

// BinDir returns where the binaries are looked up.
func BinDir() string {
	if d := os.Getenv("NARWHAL_KUBE_BIN"); d != "" {
		return d
	}
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "k8s/apiserver-build/bin"
	}
	return filepath.Join(filepath.Dir(file), "..", "apiserver-build", "bin")
}

func binary(name string) (string, error) {
	p := filepath.Join(BinDir(), name)
	if st, err := os.Stat(p); err != nil || st.IsDir() {
		return "", fmt.Errorf("%w: %s (build it: cd k8s/apiserver-build && go build -o bin/ ./kube-apiserver ./etcd ./kube-controller-manager)", ErrMissing, p)
	}
	return p, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Start starts etcd and kube-apiserver (and kube-controller-manager with
// opts.ControllerManager) and waits until the API server is ready.
func Start(ctx context.Context, opts Options) (*Server, error) {
	etcdBin, err := binary("etcd")
	if err != nil {
		return nil, err
	}
	apiBin, err := binary("kube-apiserver")
	if err != nil {
		return nil, err
	}
	kcmBin := ""
	if opts.ControllerManager {
		if kcmBin, err = binary("kube-controller-manager"); err != nil {
			return nil, err
		}
	}
	dir, err := os.MkdirTemp("", "kubetest-")
	if err != nil {
		return nil, fmt.Errorf("kubetest: %w", err)
	}
	s := &Server{dir: dir, AdminToken: randHex(16)}
	ok := false
	defer func() {
		if !ok {
			s.Stop()
		}
	}()

	// etcd
	cport, err := freePort()
	if err != nil {
		return nil, err
	}
	pport, err := freePort()
	if err != nil {
		return nil, err
	}
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(cport)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(pport)
	if err := s.spawn("etcd", etcdBin, "--name=kubetest", "--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=kubetest="+peerURL, "--unsafe-no-fsync", "--log-level=error"); err != nil {
		return nil, err
	}

	// service-account signing key, static tokens
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, fmt.Errorf("kubetest: key: %w", err)
	}
	keyFile := filepath.Join(dir, "sa.key")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return nil, err
	}
	tokFile := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokFile, []byte(s.AdminToken+`,admin,admin-uid,"system:masters"`+"\n"), 0o600); err != nil {
		return nil, err
	}
	aport, err := freePort()
	if err != nil {
		return nil, err
	}
	s.URL = "https://127.0.0.1:" + strconv.Itoa(aport)
	if err := s.spawn("kube-apiserver", apiBin,
		"--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port="+strconv.Itoa(aport),
		"--endpoint-reconciler-type=none", // a loopback advertise address is refused by the reconciler
		"--cert-dir="+filepath.Join(dir, "certs"),
		"--token-auth-file="+tokFile,
		"--authorization-mode=RBAC",
		"--anonymous-auth=false",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file="+keyFile,
		"--service-account-signing-key-file="+keyFile,
		"--service-cluster-ip-range=10.96.0.0/24",
		"--disable-admission-plugins=ServiceAccount",
		"--enable-priority-and-fairness=false",
		"--watch-cache=true",
		"-v=0"); err != nil {
		return nil, err
	}
	if err := s.waitReady(ctx, 120*time.Second); err != nil {
		return nil, err
	}
	if kcmBin != "" {
		kc := filepath.Join(dir, "kcm.kubeconfig")
		if err := os.WriteFile(kc, []byte(s.kubeconfig()), 0o600); err != nil {
			return nil, err
		}
		kport, err := freePort()
		if err != nil {
			return nil, err
		}
		if err := s.spawn("kube-controller-manager", kcmBin,
			"--kubeconfig="+kc, "--authentication-kubeconfig="+kc, "--authorization-kubeconfig="+kc,
			"--controllers=replicaset,deployment", "--leader-elect=false",
			"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(kport),
			"--cert-dir="+filepath.Join(dir, "kcm-certs"),
			"--concurrent-replicaset-syncs=2", "--concurrent-deployment-syncs=2",
			"-v=0"); err != nil {
			return nil, err
		}
	}
	ok = true
	return s, nil
}

func (s *Server) kubeconfig() string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: t
  cluster: {server: %q, insecure-skip-tls-verify: true}
users:
- name: admin
  user: {token: %q}
contexts:
- name: t
  context: {cluster: t, user: admin}
current-context: t
`, s.URL, s.AdminToken)
}

func (s *Server) spawn(name, bin string, args ...string) error {
	logf, err := os.Create(filepath.Join(s.dir, name+".log"))
	if err != nil {
		return fmt.Errorf("kubetest: %w", err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = s.dir
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("kubetest: start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, exited: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.exited) }()
	s.procs = append(s.procs, p)
	s.logs = append(s.logs, logf)
	return nil
}

// Log returns the tail of a component's log (etcd, kube-apiserver,
// kube-controller-manager), for failure messages.
func (s *Server) Log(name string) string {
	b, err := os.ReadFile(filepath.Join(s.dir, name+".log"))
	if err != nil {
		return err.Error()
	}
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

func (s *Server) waitReady(ctx context.Context, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	cfg := s.Config()
	tr, err := rest.TransportFor(cfg)
	if err != nil {
		return fmt.Errorf("kubetest: transport: %w", err)
	}
	hc := &http.Client{Timeout: 2 * time.Second, Transport: tr}
	for {
		for _, p := range s.procs {
			select {
			case <-p.exited:
				return fmt.Errorf("kubetest: %s exited: %v\n%s", p.name, p.err, s.Log(p.name))
			default:
			}
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/readyz", nil)
		resp, err := hc.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("readyz %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kubetest: API server not ready after %v: %w\n%s", limit, err, s.Log("kube-apiserver"))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Stop ends every process and removes the data directory.
func (s *Server) Stop() {
	s.stopOnce.Do(func() {
		for i := len(s.procs) - 1; i >= 0; i-- {
			p := s.procs[i]
			_ = p.cmd.Process.Signal(os.Interrupt)
			select {
			case <-p.exited:
			case <-time.After(10 * time.Second):
				_ = p.cmd.Process.Kill()
				<-p.exited
			}
		}
		for _, f := range s.logs {
			f.Close()
		}
		os.RemoveAll(s.dir)
	})
}

// ConfigFor returns a rest.Config authenticating with token (TLS is not
// verified: the serving certificate is self-signed per run).
func (s *Server) ConfigFor(token string) *rest.Config {
	return &rest.Config{
		Host: s.URL, BearerToken: token,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true},
		QPS:             200, Burst: 400, Timeout: 30 * time.Second,
	}
}

// Config is the admin's rest.Config.
func (s *Server) Config() *rest.Config { return s.ConfigFor(s.AdminToken) }

// Client is the admin's clientset.
func (s *Server) Client() kubernetes.Interface {
	c, err := kubernetes.NewForConfig(s.Config())
	if err != nil {
		panic(fmt.Sprintf("kubetest: admin client: %v", err)) // only on a malformed constant config
	}
	return c
}

// Namespace creates a fresh namespace for one test and deletes it at the
// test's end.
func (s *Server) Namespace(t testing.TB) string {
	t.Helper()
	name := "t-" + strings.ToLower(randHex(4))
	c := s.Client()
	if _, err := c.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	t.Cleanup(func() {
		_ = c.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

// ServiceAccountToken creates (if needed) the ServiceAccount ns/name and
// returns a bound token for it from the TokenRequest API.
func (s *Server) ServiceAccountToken(ctx context.Context, ns, name string) (string, error) {
	c := s.Client()
	_, err := c.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !strings.Contains(err.Error(), "already exists") {
		return "", fmt.Errorf("kubetest: service account %s/%s: %w", ns, name, err)
	}
	exp := int64(3600)
	tr, err := c.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("kubetest: token for %s/%s: %w", ns, name, err)
	}
	return tr.Status.Token, nil
}

// shared is the package's control plane, set by Main.
var (
	shared    *Server
	sharedErr error
)

// Main starts one control plane for the test package, runs its tests and
// stops it. In CI (CI=true) a control plane that cannot start fails the
// run; elsewhere the tests that need it skip (Get).
func Main(m *testing.M, opts Options) int {
	ctx := context.Background()
	shared, sharedErr = Start(ctx, opts)
	if sharedErr != nil {
		if os.Getenv("CI") == "true" {
			fmt.Fprintln(os.Stderr, "kubetest: CI=true and the control plane did not start:", sharedErr)
			return 1
		}
		fmt.Fprintln(os.Stderr, "kubetest: control plane not started; tests that need it skip:", sharedErr)
	}
	code := m.Run()
	if shared != nil {
		shared.Stop()
	}
	return code
}

// Get returns the package's control plane, skipping t when there is none
// (Main fails the run in CI before any test starts).
func Get(t testing.TB) *Server {
	t.Helper()
	if shared == nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("kubetest: no control plane in CI: %v", sharedErr)
		}
		t.Skipf("kubetest: no control plane (%v)", sharedErr)
	}
	return shared
}
