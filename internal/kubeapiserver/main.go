// Command kube-apiserver is the test harness's Kubernetes API server: the
// upstream server command, built from the Go module proxy in this separate
// module so the project's own module never requires k8s.io/kubernetes.
// Tests of lease/kubestore and the lab start it against a local etcd.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
