// Package e2e holds the Kubernetes tests that run against a real control
// plane (k8s/kubetest: etcd, kube-apiserver with token authentication and
// RBAC, kube-controller-manager's replicaset and deployment controllers):
// leader election and failover across three cores, the leader dying in
// the middle of a move (after the draining mark, after the relabel)
// with pods, the new leader's tables, its saved state and the engines
// checked to agree, relabel and scale
// moves, the refusal to relabel a pod whose owner selects on the role
// label, the agent's engine discovery on its node, and the chart's RBAC
// (deploy/narwhal.yaml, the chart's rendered output) allowing every call
// the core and the agent make and denying others.
//
// There is no kubelet and no scheduler: the tests play the kubelet (pods
// are created with spec.nodeName, their status is set through the status
// subresource, and pods the ReplicaSet controller deletes are finished).
// A replica "crashes" by losing its API connection (every request fails
// from then on) before its context ends, so nothing it would do on its
// way out reaches the API server.
//
// One control plane serves every test of the package (TestMain); each
// test works in its own namespace. Without the binaries the tests skip,
// except in CI (CI=true), where they fail.
package e2e
