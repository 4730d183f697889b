//go:build tools

package tools

import (
	_ "github.com/NVIDIA/go-nvml/pkg/nvml"
	_ "github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	_ "github.com/cilium/ebpf"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/prometheus/common/expfmt"
	_ "github.com/puzpuzpuz/xsync/v3"
	_ "go.yaml.in/yaml/v3"
	_ "k8s.io/client-go/kubernetes/fake"
	_ "k8s.io/client-go/tools/leaderelection"
)
