// Package talosconfig generates and validates Talos machine configs with
// Talos' own machinery (pkg/machinery), so that the provider's rendering is
// checked against the code a real node runs rather than against talos-sim's
// reading of it.
//
//   - Worker generates a worker config the way `talosctl gen config` does
//     (generate.NewInput(...).Config(worker)), for a chosen Talos version
//     contract: one machinery release writes the shape of every older minor.
//   - Validate loads a config with configloader.NewFromBytes and validates it
//     in metal mode, strict (warnings of the v1alpha1 document are errors),
//     which is what a node in maintenance mode does on ApplyConfiguration
//     (without strict; Talos 1.13 answers a failure of either step with
//     InvalidArgument and the error's text).
package talosconfig

import (
	"errors"
	"fmt"
	"time"

	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/validation"
	"github.com/siderolabs/talos/pkg/machinery/constants"
)

// WorkerOptions are the inputs of `talosctl gen config` that matter for a
// worker config.
type WorkerOptions struct {
	ClusterName string
	// Endpoint is the control plane URL (https://host:port).
	Endpoint string
	// TalosVersion selects the version contract ("v1.11", "v1.13.9"): the
	// config has the shape that Talos minor's talosctl writes.
	TalosVersion string
	// KubernetesVersion of the kubelet image (default: machinery's default).
	KubernetesVersion string
	// KubernetesCA is the PEM certificate of the cluster's Kubernetes CA
	// (default: a fresh one, as `talosctl gen config` makes).
	KubernetesCA []byte
	// InstallDisk and InstallImage go to machine.install (empty: left out).
	InstallDisk  string
	InstallImage string
	// WithDocs keeps machinery's documentation comments and examples, as
	// `talosctl gen config` writes them by default.
	WithDocs bool
}

// Worker returns a worker machine config with fresh secrets.
func Worker(o WorkerOptions) ([]byte, error) {
	contract, err := config.ParseContractFromVersion(o.TalosVersion)
	if err != nil {
		return nil, fmt.Errorf("talos version: %w", err)
	}

	bundle, err := secrets.NewBundle(secrets.NewFixedClock(time.Now()), contract)
	if err != nil {
		return nil, fmt.Errorf("generating secrets: %w", err)
	}

	if len(o.KubernetesCA) > 0 {
		// A worker config carries only the CA certificate; the key stays
		// with the cluster that owns it.
		bundle.Certs.K8s = &x509.PEMEncodedCertificateAndKey{Crt: o.KubernetesCA}
	}

	kubernetesVersion := o.KubernetesVersion
	if kubernetesVersion == "" {
		kubernetesVersion = constants.DefaultKubernetesVersion
	}

	opts := []generate.Option{
		generate.WithVersionContract(contract),
		generate.WithSecretsBundle(bundle),
	}
	if o.InstallDisk != "" {
		opts = append(opts, generate.WithInstallDisk(o.InstallDisk))
	}

	if o.InstallImage != "" {
		opts = append(opts, generate.WithInstallImage(o.InstallImage))
	}

	input, err := generate.NewInput(o.ClusterName, o.Endpoint, kubernetesVersion, opts...)
	if err != nil {
		return nil, fmt.Errorf("generate input: %w", err)
	}

	cfg, err := input.Config(machine.TypeWorker)
	if err != nil {
		return nil, fmt.Errorf("generating the worker config: %w", err)
	}

	comments := encoder.CommentsDisabled
	if o.WithDocs {
		comments = encoder.CommentsAll
	}

	return cfg.EncodeBytes(encoder.WithComments(comments))
}

// MetalMode is the runtime mode of a bare-metal node (`talosctl validate
// --mode metal`): an install section is required.
type MetalMode struct{}

func (MetalMode) String() string { return "metal" }

// RequiresInstall implements validation.RuntimeMode.
func (MetalMode) RequiresInstall() bool { return true }

// InContainer implements validation.RuntimeMode.
func (MetalMode) InContainer() bool { return false }

var _ validation.RuntimeMode = MetalMode{}

// ParseError is a config that machinery cannot load (YAML, unknown kinds or
// keys, duplicate documents).
type ParseError struct{ Err error }

func (e *ParseError) Error() string { return e.Err.Error() }

func (e *ParseError) Unwrap() error { return e.Err }

// InvalidError is a config that loads but fails validation.
type InvalidError struct{ Err error }

func (e *InvalidError) Error() string { return e.Err.Error() }

func (e *InvalidError) Unwrap() error { return e.Err }

// Validate loads and validates a machine config in metal mode, strict. The
// warnings are those machinery still reports as warnings in strict mode
// (typed documents').
func Validate(data []byte) ([]string, error) {
	cfg, err := configloader.NewFromBytes(data)
	if err != nil {
		return nil, &ParseError{Err: err}
	}

	warnings, err := cfg.Validate(MetalMode{}, validation.WithStrict())
	if err != nil {
		return warnings, &InvalidError{Err: err}
	}

	return warnings, nil
}

// IsParseError tells a config that does not load from one that does not validate.
func IsParseError(err error) bool {
	var parse *ParseError

	return errors.As(err, &parse)
}
