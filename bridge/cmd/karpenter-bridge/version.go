package main

import (
	"fmt"
	"runtime/debug"
)

// version is the release's one version (the workspace version in Cargo.toml,
// the charts' version and appVersion, the images' tag); hack/version-check.py
// fails when it differs from them.
const version = "0.1.0"

// coreModule is the Karpenter core module the bridge links.
const coreModule = "sigs.k8s.io/karpenter"

// versionLine answers `karpenter-bridge --version`: this bridge's version and
// the Karpenter core it was built with, read from the binary's build info.
func versionLine() string {
	core := "unknown"
	if info, ok := debug.ReadBuildInfo(); ok {
		core = moduleVersion(info, coreModule)
	}
	return fmt.Sprintf("karpenter-bridge %s (karpenter core %s)", version, core)
}

// moduleVersion is the version of module path among the build's
// dependencies, following a replace directive; "unknown" when absent.
func moduleVersion(info *debug.BuildInfo, path string) string {
	for _, m := range info.Deps {
		if m.Path != path {
			continue
		}
		if m.Replace != nil && m.Replace.Version != "" {
			return m.Replace.Version
		}
		if m.Version != "" {
			return m.Version
		}
	}
	return "unknown"
}

// isVersionFlag reports whether args ask for the version (`--version` or
// `-version` as the only argument).
func isVersionFlag(args []string) bool {
	return len(args) == 1 && (args[0] == "--version" || args[0] == "-version")
}
