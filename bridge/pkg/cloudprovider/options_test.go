package cloudprovider

import (
	"testing"
	"time"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestOptionsFromEnv(t *testing.T) {
	o, err := OptionsFromEnv(env(map[string]string{"POD_NAME": "karpenter-0"}))
	if err != nil {
		t.Fatal(err)
	}
	if o.Socket != DefaultSocket || o.CallTimeout != 5*time.Second || o.CreateTimeout != time.Minute || o.ListTimeout != 30*time.Second ||
		o.CatalogMaxStaleness != 5*time.Minute || o.Identity != "karpenter-0" {
		t.Fatalf("defaults: %+v", o)
	}

	o, err = OptionsFromEnv(env(map[string]string{
		"PROVIDER_SOCKET": "/tmp/p.sock", "PROVIDER_CALL_TIMEOUT": "2s", "PROVIDER_CREATE_TIMEOUT": "45s", "PROVIDER_LIST_TIMEOUT": "1m",
		"PROVIDER_STARTUP_TIMEOUT": "10s", "PROVIDER_CATALOG_MAX_STALENESS": "30s",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if o.Socket != "/tmp/p.sock" || o.CallTimeout != 2*time.Second || o.CreateTimeout != 45*time.Second || o.ListTimeout != time.Minute ||
		o.StartupTimeout != 10*time.Second || o.CatalogMaxStaleness != 30*time.Second || o.Identity == "" {
		t.Fatalf("overrides: %+v", o)
	}

	for _, bad := range []map[string]string{
		{"PROVIDER_CALL_TIMEOUT": "soon"},
		{"PROVIDER_CALL_TIMEOUT": "0"},
		{"PROVIDER_CREATE_TIMEOUT": "0s"},
		{"PROVIDER_LIST_TIMEOUT": "-1s"},
		{"PROVIDER_CATALOG_MAX_STALENESS": "0"},
	} {
		if _, err := OptionsFromEnv(env(bad)); err == nil {
			t.Fatalf("%v: want an error", bad)
		}
	}
}
