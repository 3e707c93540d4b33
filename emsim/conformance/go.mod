module github.com/karpenter-provider-scaleway/emsim/conformance

go 1.26.0

require github.com/scaleway/scaleway-sdk-go v1.39.0

require gopkg.in/yaml.v2 v2.4.0 // indirect
