// Command kubectl is the Kubernetes command-line client at the same version as the
// control plane the e2e harness runs, built from the upstream module so that the
// repository's scripts (hack/chart-check.sh, hack/apiserver.sh users) never depend on
// whichever kubectl the host happens to have.
package main

import (
	_ "k8s.io/client-go/plugin/pkg/client/auth" // exec and OIDC credential plugins of kubeconfigs
	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	command := cmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		util.CheckErr(err)
	}
}
