package main

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestModuleVersion(t *testing.T) {
	info := &debug.BuildInfo{Deps: []*debug.Module{
		{Path: "k8s.io/api", Version: "v0.35.0"},
		{Path: coreModule, Version: "v1.15.0"},
	}}
	if got := moduleVersion(info, coreModule); got != "v1.15.0" {
		t.Fatalf("moduleVersion = %q, want v1.15.0", got)
	}
	info.Deps[1].Replace = &debug.Module{Path: "example.com/fork", Version: "v1.15.1-fork"}
	if got := moduleVersion(info, coreModule); got != "v1.15.1-fork" {
		t.Fatalf("replaced moduleVersion = %q, want v1.15.1-fork", got)
	}
	if got := moduleVersion(&debug.BuildInfo{}, coreModule); got != "unknown" {
		t.Fatalf("absent moduleVersion = %q, want unknown", got)
	}
}

func TestVersionFlag(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"-version"}} {
		if !isVersionFlag(args) {
			t.Errorf("%v: not taken as the version flag", args)
		}
	}
	for _, args := range [][]string{nil, {"crds", "x"}, {"--version", "x"}, {"--metrics-port=8080"}} {
		if isVersionFlag(args) {
			t.Errorf("%v: taken as the version flag", args)
		}
	}
	if line := versionLine(); !strings.HasPrefix(line, "karpenter-bridge "+version+" (karpenter core ") {
		t.Fatalf("versionLine = %q", line)
	}
}
