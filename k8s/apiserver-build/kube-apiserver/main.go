// Command kube-apiserver is the upstream Kubernetes API server, built from
// the k8s.io/kubernetes module at the version pinned in ../go.mod. It exists
// only so the k8s tests can run against a real API server (see
// k8s/kubetest); it is not part of the narwhal product.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
