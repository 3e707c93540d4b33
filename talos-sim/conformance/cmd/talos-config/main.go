// Command talos-config generates and validates Talos machine configs with
// Talos' own machinery (see package talosconfig).
//
//	talos-config gen -cluster-name NAME -endpoint URL -talos-version v1.13 [-kubernetes-ca FILE|-] [-o FILE]
//	talos-config validate < config.yaml
//
// gen writes a worker config as `talosctl gen config` of that Talos minor
// would (fresh secrets; the config holds them, so it is never logged).
//
// validate reads a config on stdin and validates it in metal mode, strict.
// Exit status: 0 valid (warnings, if any, on stdout, one per line); 1 invalid;
// 2 the config does not load; 3 usage or I/O error. On 1 and 2, stderr holds
// exactly Talos' error message, which talos-sim returns as Talos' maintenance
// API does (InvalidArgument, the message as is).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/karpenter-provider-scaleway/talos-sim/conformance/talosconfig"
)

const (
	exitInvalid = 1
	exitParse   = 2
	exitUsage   = 3
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}

	switch os.Args[1] {
	case "gen":
		os.Exit(gen(os.Args[2:]))
	case "validate":
		os.Exit(validate(os.Stdin))
	default:
		usage()
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: talos-config gen [flags] | talos-config validate < config.yaml")
	os.Exit(exitUsage)
}

func gen(args []string) int {
	flags := flag.NewFlagSet("gen", flag.ContinueOnError)
	var (
		o      talosconfig.WorkerOptions
		caFile string
		out    string
	)
	flags.StringVar(&o.ClusterName, "cluster-name", "", "cluster name (required)")
	flags.StringVar(&o.Endpoint, "endpoint", "", "control plane endpoint, https://host:port (required)")
	flags.StringVar(&o.TalosVersion, "talos-version", "", "Talos version contract, e.g. v1.13 (required)")
	flags.StringVar(&o.KubernetesVersion, "kubernetes-version", "", "kubelet version (default: machinery's)")
	flags.StringVar(&caFile, "kubernetes-ca", "", "PEM file of the cluster's Kubernetes CA certificate, - for stdin (default: a fresh CA)")
	flags.StringVar(&o.InstallDisk, "install-disk", "/dev/sda", "machine.install.disk (empty: left out)")
	flags.StringVar(&o.InstallImage, "install-image", "", "machine.install.image (empty: left out)")
	flags.BoolVar(&o.WithDocs, "with-docs", false, "keep documentation comments and examples")
	flags.StringVar(&out, "o", "-", "output file (- for stdout)")

	if err := flags.Parse(args); err != nil {
		return exitUsage
	}

	if o.ClusterName == "" || o.Endpoint == "" || o.TalosVersion == "" {
		fmt.Fprintln(os.Stderr, "gen: -cluster-name, -endpoint and -talos-version are required")

		return exitUsage
	}

	if caFile != "" {
		var (
			pem []byte
			err error
		)
		if caFile == "-" {
			pem, err = io.ReadAll(os.Stdin)
		} else {
			pem, err = os.ReadFile(caFile)
		}

		if err != nil {
			fmt.Fprintf(os.Stderr, "gen: reading the Kubernetes CA: %v\n", err)

			return exitUsage
		}

		o.KubernetesCA = pem
	}

	data, err := talosconfig.Worker(o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "gen: %v\n", err)

		return exitUsage
	}

	if out == "-" {
		_, err = os.Stdout.Write(data)
	} else {
		err = os.WriteFile(out, data, 0o600)
	}

	if err != nil {
		fmt.Fprintf(os.Stderr, "gen: writing the config: %v\n", err)

		return exitUsage
	}

	return 0
}

func validate(in io.Reader) int {
	data, err := io.ReadAll(in)
	if err != nil {
		fmt.Fprintf(os.Stderr, "reading the config: %v\n", err)

		return exitUsage
	}

	warnings, err := talosconfig.Validate(data)
	for _, w := range warnings {
		fmt.Println(w)
	}

	var invalid *talosconfig.InvalidError

	switch {
	case err == nil:
		return 0
	case errors.As(err, &invalid):
		fmt.Fprint(os.Stderr, err.Error())

		return exitInvalid
	default:
		fmt.Fprint(os.Stderr, err.Error())

		return exitParse
	}
}
