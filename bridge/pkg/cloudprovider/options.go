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
	// CallTimeout bounds Delete, Get, IsDrifted, RepairPolicies, Info and
	// SetLeadership (PROVIDER_CALL_TIMEOUT). The provider answers these
	// within a second.
	CallTimeout time.Duration
	// CreateTimeout bounds Create (PROVIDER_CREATE_TIMEOUT). Core calls
	// Create from the NodeClaim lifecycle controller, one NodeClaim per
	// call, not from the provisioning loop, so a slow Create holds no other
	// NodeClaim. During a burst (100 NodeClaims at once) the provider paces
	// its Scaleway calls and a Create that orders a server can take several
	// seconds; with the 5 s of the other calls most of them timed out after
	// the server was ordered, core never got their providerIDs and deleted
	// them at the launch timeout, and the servers and Nodes were left over
	// (docs/conformance.md, Utilization).
	CreateTimeout time.Duration
	// ListTimeout bounds List (PROVIDER_LIST_TIMEOUT); GetInstanceTypes is
	// answered from memory (see CatalogMaxStaleness).
	ListTimeout time.Duration
	// StartupTimeout is how long the bridge waits for the provider to answer
	// Info at startup before it gives up and exits (PROVIDER_STARTUP_TIMEOUT).
	StartupTimeout time.Duration
	// CatalogMaxStaleness is how long the instance-type catalog received on
	// the watch stream keeps being served after the stream broke
	// (PROVIDER_CATALOG_MAX_STALENESS); after that GetInstanceTypes fails
	// until the stream is back.
	CatalogMaxStaleness time.Duration
	// Identity names this replica in SetLeadership (POD_NAME, else the host name).
	Identity string
}

// DefaultSocket is where the provider listens unless PROVIDER_SOCKET says otherwise.
const DefaultSocket = "/var/run/karpenter/provider.sock"

// OptionsFromEnv reads Options from the environment through getenv (os.Getenv
// in production, a map in tests).
func OptionsFromEnv(getenv func(string) string) (Options, error) {
	o := Options{
		Socket:              DefaultSocket,
		CallTimeout:         5 * time.Second,
		CreateTimeout:       time.Minute,
		ListTimeout:         30 * time.Second,
		StartupTimeout:      5 * time.Minute,
		CatalogMaxStaleness: 5 * time.Minute,
		Identity:            getenv("POD_NAME"),
	}
	if v := getenv("PROVIDER_SOCKET"); v != "" {
		o.Socket = v
	}
	durations := []struct {
		env string
		dst *time.Duration
	}{
		{"PROVIDER_CALL_TIMEOUT", &o.CallTimeout},
		{"PROVIDER_CREATE_TIMEOUT", &o.CreateTimeout},
		{"PROVIDER_LIST_TIMEOUT", &o.ListTimeout},
		{"PROVIDER_STARTUP_TIMEOUT", &o.StartupTimeout},
		{"PROVIDER_CATALOG_MAX_STALENESS", &o.CatalogMaxStaleness},
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
		// Zero would fail every call; zero staleness would fail every
		// GetInstanceTypes during a provider restart.
		if parsed <= 0 {
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
