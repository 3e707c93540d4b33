package cloudprovider

import (
	"fmt"
	"os"
	"time"
)

// Options configure the bridge's side of the provider contract. They come from
// environment variables only: Karpenter core parses os.Args itself
// (options.Injectables) and rejects flags it does not know.
type Options struct {
	// Socket is the provider's Unix socket (PROVIDER_SOCKET).
	Socket string
	// CallTimeout bounds Create, Delete, Get, IsDrifted, RepairPolicies, Info
	// and SetLeadership (PROVIDER_CALL_TIMEOUT). The provider answers these
	// within a second; Create in particular must never hold core's
	// provisioning loop for long.
	CallTimeout time.Duration
	// ListTimeout bounds List and GetInstanceTypes (PROVIDER_LIST_TIMEOUT).
	ListTimeout time.Duration
	// StartupTimeout is how long the bridge waits for the provider to answer
	// Info at startup before it gives up and exits (PROVIDER_STARTUP_TIMEOUT).
	StartupTimeout time.Duration
	// InstanceTypesTTL is how long a GetInstanceTypes answer is reused
	// (PROVIDER_INSTANCE_TYPES_TTL). Core asks for instance types on every
	// scheduling batch and disruption poll.
	InstanceTypesTTL time.Duration
	// Identity names this replica in SetLeadership (POD_NAME, else the host name).
	Identity string
}

// DefaultSocket is where the provider listens unless PROVIDER_SOCKET says otherwise.
const DefaultSocket = "/var/run/karpenter/provider.sock"

// OptionsFromEnv reads Options from the environment through getenv (os.Getenv
// in production, a map in tests).
func OptionsFromEnv(getenv func(string) string) (Options, error) {
	o := Options{
		Socket:           DefaultSocket,
		CallTimeout:      5 * time.Second,
		ListTimeout:      30 * time.Second,
		StartupTimeout:   5 * time.Minute,
		InstanceTypesTTL: 5 * time.Second,
		Identity:         getenv("POD_NAME"),
	}
	if v := getenv("PROVIDER_SOCKET"); v != "" {
		o.Socket = v
	}
	durations := []struct {
		env string
		dst *time.Duration
	}{
		{"PROVIDER_CALL_TIMEOUT", &o.CallTimeout},
		{"PROVIDER_LIST_TIMEOUT", &o.ListTimeout},
		{"PROVIDER_STARTUP_TIMEOUT", &o.StartupTimeout},
		{"PROVIDER_INSTANCE_TYPES_TTL", &o.InstanceTypesTTL},
	}
	for _, d := range durations {
		v := getenv(d.env)
		if v == "" {
			continue
		}
		parsed, err := time.ParseDuration(v)
		if err != nil {
			return Options{}, fmt.Errorf("parsing %s=%q: %w", d.env, v, err)
		}
		// A zero TTL disables the cache; a zero timeout would fail every call.
		if parsed < 0 || (parsed == 0 && d.dst != &o.InstanceTypesTTL) {
			return Options{}, fmt.Errorf("parsing %s=%q: must be positive", d.env, v)
		}
		*d.dst = parsed
	}
	if o.Identity == "" {
		host, err := os.Hostname()
		if err != nil {
			return Options{}, fmt.Errorf("reading host name for the replica identity: %w", err)
		}
		o.Identity = host
	}
	return o, nil
}
