// Command etcd is the upstream etcd server at the version k8s.io/kubernetes
// pins (see ../go.mod), the storage behind the test API server.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
