// Command etcd runs a single-member etcd for the e2e control plane, built on
// go.etcd.io/etcd/server/v3/embed so the harness needs no downloaded binary.
// It serves until SIGTERM or SIGINT, then closes the server cleanly so the data
// directory is consistent and the ports are released before it exits.
package main

import (
	"errors"
	"flag"
	"fmt"
	"log"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

type options struct {
	name            string
	dataDir         string
	clientURLs      string
	advertiseURLs   string
	peerURLs        string
	metricsURLs     string
	logLevel        string
	unsafeNoFsync   bool
	quotaBytes      int64
	slowRequest     time.Duration
	readyTimeout    time.Duration
	shutdownTimeout time.Duration
}

func main() {
	opts := parseFlags(os.Args[1:])
	if err := run(opts); err != nil {
		log.Printf("etcd: %v", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) options {
	var o options
	fs := flag.NewFlagSet("etcd", flag.ExitOnError)
	fs.StringVar(&o.name, "name", "default", "member name")
	fs.StringVar(&o.dataDir, "data-dir", "", "data directory (required)")
	fs.StringVar(&o.clientURLs, "listen-client-urls", "http://127.0.0.1:2379", "comma-separated URLs to serve clients on")
	fs.StringVar(&o.advertiseURLs, "advertise-client-urls", "", "comma-separated client URLs to advertise (default: --listen-client-urls)")
	fs.StringVar(&o.peerURLs, "listen-peer-urls", "http://127.0.0.1:2380", "comma-separated URLs to serve peers on (also advertised)")
	fs.StringVar(&o.metricsURLs, "listen-metrics-urls", "", "comma-separated URLs to serve /metrics and /health on")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	// Test clusters throw their data away; skipping fsync makes a slow disk
	// irrelevant to the API server's latency.
	fs.BoolVar(&o.unsafeNoFsync, "unsafe-no-fsync", false, "do not fsync (data may be lost on a crash)")
	fs.Int64Var(&o.quotaBytes, "quota-backend-bytes", 0, "backend size quota in bytes (0: etcd's default)")
	fs.DurationVar(&o.slowRequest, "warning-unary-request-duration", embed.DefaultWarningUnaryRequestDuration, "log requests slower than this")
	fs.DurationVar(&o.readyTimeout, "ready-timeout", 60*time.Second, "how long to wait for the server to become ready")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 15*time.Second, "how long to wait for a clean stop")
	_ = fs.Parse(args) // ExitOnError: Parse exits on failure
	return o
}

func parseURLs(flagName, list string) ([]url.URL, error) {
	var out []url.URL
	for _, raw := range strings.Split(list, ",") {
		raw = strings.TrimSpace(raw)
		if raw == "" {
			continue
		}
		u, err := url.Parse(raw)
		if err != nil {
			return nil, fmt.Errorf("parsing --%s %q: %w", flagName, raw, err)
		}
		out = append(out, *u)
	}
	return out, nil
}

func buildConfig(o options) (*embed.Config, error) {
	if o.dataDir == "" {
		return nil, errors.New("--data-dir is required")
	}
	cfg := embed.NewConfig()
	cfg.Name = o.name
	cfg.Dir = o.dataDir
	cfg.Logger = "zap"
	cfg.LogLevel = o.logLevel
	cfg.LogOutputs = []string{"stderr"}
	cfg.UnsafeNoFsync = o.unsafeNoFsync
	// embed leaves this at zero, which logs every request as slow.
	cfg.WarningUnaryRequestDuration = o.slowRequest
	if o.quotaBytes > 0 {
		cfg.QuotaBackendBytes = o.quotaBytes
	}

	var err error
	if cfg.ListenClientUrls, err = parseURLs("listen-client-urls", o.clientURLs); err != nil {
		return nil, err
	}
	cfg.AdvertiseClientUrls = cfg.ListenClientUrls
	if o.advertiseURLs != "" {
		if cfg.AdvertiseClientUrls, err = parseURLs("advertise-client-urls", o.advertiseURLs); err != nil {
			return nil, err
		}
	}
	if cfg.ListenPeerUrls, err = parseURLs("listen-peer-urls", o.peerURLs); err != nil {
		return nil, err
	}
	cfg.AdvertisePeerUrls = cfg.ListenPeerUrls
	if cfg.ListenMetricsUrls, err = parseURLs("listen-metrics-urls", o.metricsURLs); err != nil {
		return nil, err
	}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("validating config: %w", err)
	}
	return cfg, nil
}

func run(o options) error {
	cfg, err := buildConfig(o)
	if err != nil {
		return err
	}
	// Subscribe before starting so a signal during start-up is not lost.
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("starting etcd: %w", err)
	}

	select {
	case <-e.Server.ReadyNotify():
		log.Printf("etcd: ready, serving clients on %s", o.clientURLs)
	case <-time.After(o.readyTimeout):
		logCloseError(closeWithin(e, o.shutdownTimeout))
		return fmt.Errorf("waiting for etcd to become ready: not ready after %s", o.readyTimeout)
	case sig := <-signals:
		log.Printf("etcd: %s during start-up, stopping", sig)
		return closeWithin(e, o.shutdownTimeout)
	}

	select {
	case sig := <-signals:
		log.Printf("etcd: %s, stopping", sig)
		return closeWithin(e, o.shutdownTimeout)
	case err := <-e.Err():
		logCloseError(closeWithin(e, o.shutdownTimeout))
		return fmt.Errorf("serving: %w", err)
	}
}

// closeWithin stops the server, giving up after timeout so a wedged shutdown
// cannot keep the process (and its ports) alive forever.
func closeWithin(e *embed.Etcd, timeout time.Duration) error {
	done := make(chan struct{})
	go func() {
		e.Close()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("closing etcd: not stopped after %s", timeout)
	}
}

func logCloseError(err error) {
	if err != nil {
		log.Printf("etcd: %v", err)
	}
}
