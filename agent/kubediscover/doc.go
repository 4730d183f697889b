// Package kubediscover finds the inference engines on the agent's own node
// through the Kubernetes API server, so the agent needs no hand-written
// engine list on Kubernetes (the static list in the agent's configuration
// stays for hosts without Kubernetes).
//
// What it reads, per engine pod:
//
//   - the pods: a list and watch of pods with the field selector
//     spec.nodeName=<node> and the configured label selector (by default
//     the role label in (prefill, decode)); only Running pods with an IP
//     are engines;
//   - the metrics endpoint: http://<pod IP>:<port><path>, the port being
//     the pod annotation narwhal.io/metrics-port (a number or a container
//     port name), else the container port named metrics_port_name
//     (default "http"), else the first container port; the path is the
//     annotation narwhal.io/metrics-path, else metrics_path ("/metrics").
//     The pod IP is reached over the pod network: the agent needs no host
//     network;
//   - the engine kind: annotation narwhal.io/engine-kind (vllm, sglang),
//     else default_kind;
//   - id, model, GPU kind and role as the core reads them (k8s/podmeta, the
//     configured role label); a pod without a GPU kind is reported with
//     the kind NVML names for its GPUs (agent.EngineConfig.GPUKind);
//   - the tensor-parallel degree (the wire report's tp, which picks the
//     core's latency profile or prior of (model, GPU, TP)), the first of:
//     1. the annotation narwhal.io/tensor-parallel-size (an integer in
//     [1, 1024]; anything else makes the pod no engine, like the other
//     annotations);
//     2. the engine container's flags, in its command and args (each
//     split on white space, so `sh -c "vllm serve ..."` is read):
//     vLLM --tensor-parallel-size N, -tp N (or =N, or underscores),
//     SGLang --tp-size N, --tp N; the last one wins, as in argparse;
//     $(VAR) is expanded from the container's literal env values as the
//     kubelet does; a value that is no number (a shell $TP) is skipped;
//     3. the engine's GPU count: the pod's GPUs per PodResources, else
//     the container's nvidia.com/gpu (nvidia.com/mig-*) limit; when
//     another container of the pod holds GPUs too, the engine container's
//     limit.
//     The engine container is the one serving the metrics port, else the
//     first. Nothing found: tp 0 (unknown, priced as TP 1);
//   - GPUs: the kubelet's PodResources API (agent/podresources) gives each
//     pod's GPU ids; NVML's process list cross-checks it: a process on one
//     of the pod's GPUs must belong to the pod (its /proc/<pid>/cgroup names
//     the pod UID). A process of another pod on the pod's GPU is a
//     disagreement (logged and counted in
//     narwhal_agent_gpu_mapping_disagreements_total once while NVML keeps
//     listing it, not at every refresh). A PID NVML lists that /proc
//     does not show (exited, or another PID namespace) is skipped. While
//     NVML cannot list the processes on the pod's GPUs (unreadable, a
//     lost GPU, a failed process-list call) the PID found last stands,
//     rather than the engine's PID and port watches being dropped and
//     set again at each NVML fault; a process list NVML does not support
//     (MIG, some vGPU) gives none. The pod's process
//     found this way is the engine PID watched for liveness, and its
//     network namespace (/proc/<pid>/ns/net) keys the eBPF port watch, so
//     two pods listening on one port are told apart.
//
// Privileges (the chart's DaemonSet): RBAC get, list and watch on pods;
// the PodResources socket directory mounted read-only; hostPID to see the
// engine processes NVML reports; CAP_SYS_PTRACE to read another
// container's /proc/<pid>/ns/net (the kernel's ptrace read-access check,
// which CAP_BPF and CAP_PERFMON do not pass).
//
// Choices where the issue is silent:
//   - Pods not Running, without an IP, or being deleted are not engines;
//     a pod whose role label is missing or unknown is skipped (logged at
//     debug), as the core does.
//   - The GPU map is refreshed on every pod change and every
//     gpu_refresh_s (default 10 s); PodResources has no watch.
//
// Concurrency: Run owns its goroutines; Engines is safe for concurrent
// use.
package kubediscover
