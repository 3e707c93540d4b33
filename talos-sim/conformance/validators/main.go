// Command talos-validate-<minor> validates a Talos machine config with the
// machinery of an older Talos minor, as a node running that minor does on
// ApplyConfiguration: configloader.NewFromBytes, then Validate in metal mode,
// strict (warnings of the v1alpha1 document are errors).
//
//	talos-validate-v1.11 < config.yaml
//	talos-validate-v1.11 -version
//
// One source, one binary per minor: Go builds one version of a module per
// binary, so each minor's machinery is pinned by a module file of its own
// (talos-<minor>.mod and .sum beside this file, used with `go build
// -modfile`; build.sh). It is `talos-config validate`
// (talos-sim/conformance/cmd/talos-config, linked with the newest machinery)
// for an older minor. The conformance test (render_config_test.go) validates
// the configs rendered from a base config of each minor with that minor's
// validator, because an older Talos refuses documents that newer machinery
// accepts (1.11: `"HostnameConfig" "v1alpha1": not registered`; 1.12 the
// network kinds 1.13 added, e.g. `"KubeSpanConfig" "v1alpha1": not
// registered`; 1.13 the kinds 1.14 added, e.g. `"SysctlConfig"`).
//
// Exit status: 0 valid (warnings, if any, on stdout, one per line); 1 invalid;
// 2 the config does not load; 3 usage or I/O error. On 1 and 2, stderr holds
// exactly Talos' error message. -version prints the machinery version linked.
package main

import (
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/validation"
)

const (
	exitInvalid = 1
	exitParse   = 2
	exitUsage   = 3

	machineryModule = "github.com/siderolabs/talos/pkg/machinery"
)

// metalMode is the runtime mode of a bare-metal node (`talosctl validate
// --mode metal`): an install section is required.
type metalMode struct{}

func (metalMode) String() string { return "metal" }

func (metalMode) RequiresInstall() bool { return true }

func (metalMode) InContainer() bool { return false }

var _ validation.RuntimeMode = metalMode{}

func main() {
	switch {
	case len(os.Args) == 1:
		os.Exit(validate(os.Stdin))
	case len(os.Args) == 2 && os.Args[1] == "-version":
		os.Exit(version())
	default:
		fmt.Fprintf(os.Stderr, "usage: %s < config.yaml | %s -version\n", os.Args[0], os.Args[0])
		os.Exit(exitUsage)
	}
}

func validate(in io.Reader) int {
	data, err := io.ReadAll(in)
	if err != nil {
		fmt.Fprintf(os.Stderr, "reading the config: %v\n", err)

		return exitUsage
	}

	cfg, err := configloader.NewFromBytes(data)
	if err != nil {
		fmt.Fprint(os.Stderr, err.Error())

		return exitParse
	}

	warnings, err := cfg.Validate(metalMode{}, validation.WithStrict())
	for _, w := range warnings {
		fmt.Println(w)
	}

	if err != nil {
		fmt.Fprint(os.Stderr, err.Error())

		return exitInvalid
	}

	return 0
}

func version() int {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		fmt.Fprintln(os.Stderr, "no build info")

		return exitUsage
	}

	for _, dep := range info.Deps {
		if dep.Path == machineryModule {
			fmt.Println(dep.Path, dep.Version)

			return 0
		}
	}

	fmt.Fprintln(os.Stderr, machineryModule, "not linked")

	return exitUsage
}
