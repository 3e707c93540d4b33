// Command kube-apiserver runs the API server of Kubernetes, built from the upstream
// module so the e2e harness needs neither Docker nor downloaded release binaries.
package main

import (
	"os"
	_ "time/tzdata" // CronJob time zones work without a system zoneinfo

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // --logging-format=json
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics on /metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // the build-info metric
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
