package podresources

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"google.golang.org/grpc"
	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// fakeKubelet implements the real PodResourcesLister gRPC service.
type fakeKubelet struct {
	v1.UnimplementedPodResourcesListerServer
	resp  *v1.ListPodResourcesResponse
	delay time.Duration
}

func (f *fakeKubelet) List(ctx context.Context, _ *v1.ListPodResourcesRequest) (*v1.ListPodResourcesResponse, error) {
	select {
	case <-time.After(f.delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return f.resp, nil
}

// serve starts the fake on a unix socket in a temporary directory, as
// the kubelet serves /var/lib/kubelet/pod-resources/kubelet.sock.
func serve(t *testing.T, f *fakeKubelet) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "kubelet.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	v1.RegisterPodResourcesListerServer(s, f)
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	return sock
}

func dev(name string, ids ...string) *v1.ContainerDevices {
	return &v1.ContainerDevices{ResourceName: name, DeviceIds: ids}
}

func TestGPUsOverTheUnixSocket(t *testing.T) {
	f := &fakeKubelet{resp: &v1.ListPodResourcesResponse{PodResources: []*v1.PodResources{
		{Namespace: "llm", Name: "vllm-decode-0", Containers: []*v1.ContainerResources{
			{Name: "vllm", Devices: []*v1.ContainerDevices{dev("nvidia.com/gpu", "GPU-b", "GPU-a")}},
			// a sidecar sharing a GPU id is counted once
			{Name: "sidecar", Devices: []*v1.ContainerDevices{dev("nvidia.com/gpu", "GPU-a"), dev("example.com/nic", "nic0")}},
		}},
		{Namespace: "llm", Name: "sglang-prefill-0", Containers: []*v1.ContainerResources{
			{Name: "sglang", Devices: []*v1.ContainerDevices{dev("nvidia.com/mig-3g.40gb", "MIG-1")}},
		}},
		{Namespace: "kube-system", Name: "coredns", Containers: []*v1.ContainerResources{{Name: "coredns"}}},
	}}}
	c, err := New(serve(t, f))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got, err := c.GPUs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := map[PodRef][]string{
		{Namespace: "llm", Name: "vllm-decode-0"}:    {"GPU-a", "GPU-b"},
		{Namespace: "llm", Name: "sglang-prefill-0"}: {"MIG-1"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("GPUs = %v; want %v", got, want)
	}

	c2, err := New(serve(t, f), ResourcePrefixes("example.com/nic"))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	got, err = c2.GPUs(context.Background())
	if err != nil || !reflect.DeepEqual(got, map[PodRef][]string{{Namespace: "llm", Name: "vllm-decode-0"}: {"nic0"}}) {
		t.Fatalf("custom resource: %v, %v", got, err)
	}
}

func TestGPUsTimeoutAndMissingSocket(t *testing.T) {
	slow := &fakeKubelet{resp: &v1.ListPodResourcesResponse{}, delay: time.Second}
	c, err := New(serve(t, slow), WithTimeout(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	t0 := time.Now()
	if _, err := c.GPUs(context.Background()); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("slow kubelet: got %v; want ErrUnavailable", err)
	}
	if d := time.Since(t0); d > 500*time.Millisecond {
		t.Fatalf("call took %v; the 50 ms deadline was not applied", d)
	}
	gone, err := New(filepath.Join(t.TempDir(), "missing.sock"), WithTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer gone.Close()
	if _, err := gone.GPUs(context.Background()); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("missing socket: got %v; want ErrUnavailable", err)
	}
}
