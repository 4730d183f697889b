// Package podresources asks the kubelet which GPUs it gave to which pod,
// through the PodResources API v1 (k8s.io/kubelet/pkg/apis/podresources/v1)
// on the kubelet's unix socket, the way GPU exporters such as NVIDIA's
// dcgm-exporter attribute GPU metrics to pods.
//
// The DaemonSet mounts the socket's directory read-only
// (/var/lib/kubelet/pod-resources). The List call needs no Kubernetes
// credentials: access is by the socket's file permissions (root).
//
// Choices where the issue is silent:
//   - A GPU is a device whose resource name is nvidia.com/gpu or starts
//     with nvidia.com/mig- (MIG strategy "mixed"); its device id is what
//     the device plugin reports: a GPU (or MIG) UUID with the default
//     DEVICE_ID_STRATEGY=uuid, else an index. Both are accepted by the
//     agent's engine configuration (gpus). Other resource names are set
//     with ResourcePrefixes.
//   - Every call has a deadline (default 5 s) and the response size is
//     bounded (16 MiB): a hung or confused kubelet cannot stall or bloat
//     the agent.
//
// Concurrency: a Client is safe for concurrent use.
package podresources

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// DefaultSocket is the kubelet's PodResources socket.
const DefaultSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// maxMsgBytes bounds a List response.
const maxMsgBytes = 16 << 20

// ErrUnavailable: the kubelet's PodResources API could not be reached.
var ErrUnavailable = errors.New("podresources: kubelet PodResources API unavailable")

// PodRef names a pod.
type PodRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

func (p PodRef) String() string { return p.Namespace + "/" + p.Name }

// Client lists the kubelet's device assignments.
type Client struct {
	conn     *grpc.ClientConn
	api      v1.PodResourcesListerClient
	timeout  time.Duration
	prefixes []string
}

// Option configures a Client.
type Option func(*Client)

// WithTimeout bounds each call (default 5 s).
func WithTimeout(d time.Duration) Option { return func(c *Client) { c.timeout = d } }

// ResourcePrefixes replaces the GPU resource names matched (exact names
// or prefixes ending in "-" or "/"); default nvidia.com/gpu and
// nvidia.com/mig-.
func ResourcePrefixes(p ...string) Option { return func(c *Client) { c.prefixes = p } }

// New connects lazily to the unix socket at path.
func New(path string, opts ...Option) (*Client, error) {
	if path == "" {
		path = DefaultSocket
	}
	conn, err := grpc.NewClient("unix://"+path,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsgBytes)))
	if err != nil {
		return nil, fmt.Errorf("podresources: %s: %w", path, err)
	}
	c := &Client{conn: conn, api: v1.NewPodResourcesListerClient(conn), timeout: 5 * time.Second,
		prefixes: []string{"nvidia.com/gpu", "nvidia.com/mig-"}}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

func (c *Client) isGPU(name string) bool {
	for _, p := range c.prefixes {
		if name == p || (strings.HasSuffix(p, "-") || strings.HasSuffix(p, "/")) && strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// GPUs returns, for every pod holding GPUs on this node, its GPU device
// ids (sorted, each once).
func (c *Client) GPUs(ctx context.Context) (map[PodRef][]string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	resp, err := c.api.List(ctx, &v1.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("%w: List: %w", ErrUnavailable, err)
	}
	out := map[PodRef][]string{}
	for _, pr := range resp.GetPodResources() {
		ref := PodRef{Namespace: pr.GetNamespace(), Name: pr.GetName()}
		seen := map[string]bool{}
		for _, ctr := range pr.GetContainers() {
			for _, dev := range ctr.GetDevices() {
				if !c.isGPU(dev.GetResourceName()) {
					continue
				}
				for _, id := range dev.GetDeviceIds() {
					if id != "" && !seen[id] {
						seen[id] = true
						out[ref] = append(out[ref], id)
					}
				}
			}
		}
		sort.Strings(out[ref])
	}
	return out, nil
}
