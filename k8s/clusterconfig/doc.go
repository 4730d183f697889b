// Package clusterconfig is the `kubernetes` section of the narwhal-core
// configuration (Config: lease, state ConfigMap, engine selection, pools,
// drain and switch timeouts) and the role labels engines carry (Roles,
// with the narwhal and llm-d presets), with their defaults and
// validation.
//
// It links no Kubernetes client: package service loads and validates the
// section with it, so a router that embeds the service without a cluster,
// and the fuzz targets over the service's inputs, build without client-go
// (the instrumented fuzz build on 2 cores took 5 min 26 s with client-go
// in it, 1 min 41 s without). k8s/cluster, k8s/podmeta, k8s/discover and
// k8s/actuate use these types under their old names (type aliases).
//
// The defaults and the lease rule (renew deadline past 1.2 × the retry
// period, lease duration past the renew deadline) are k8s/leader's,
// k8s/actuate's and client-go's; k8s/cluster's tests hold them equal.
//
// Concurrency: values only; safe for concurrent use.
//
// Allocation contract: not on a request path.
package clusterconfig
