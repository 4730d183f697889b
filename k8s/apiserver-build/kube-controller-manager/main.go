// Command kube-controller-manager is the upstream controller manager, built
// from the k8s.io/kubernetes module pinned in ../go.mod. The k8s tests run
// only its replicaset and deployment controllers, so a scale move is judged
// by the real ReplicaSet controller's choice of the pod to delete.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() {
	os.Exit(cli.Run(app.NewControllerManagerCommand()))
}
