// Command kps-smoke is the workload of hack/kind/smoke.sh, built into a
// FROM-scratch image and loaded with `kind load docker-image`:
//
//	kps-smoke serve ADDR     answers every HTTP request with "kps-smoke <hostname>"
//	kps-smoke get URL...     GETs each URL (retrying for up to 60 s), prints the
//	                         answer's status and first line, exits 1 on a failure
//
// `get` trusts the cluster's CA when the Pod has a ServiceAccount token mounted,
// so it can reach the API server by its Service name or the node's address.
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

const caFile = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: kps-smoke serve ADDR | get URL...")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2])
	case "get":
		err = getAll(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "kps-smoke: %v\n", err)
		os.Exit(1)
	}
}

func serve(addr string) error {
	host, _ := os.Hostname()
	srv := &http.Server{
		Addr:              addr,
		ReadHeaderTimeout: 5 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "kps-smoke %s\n", host)
		}),
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving on %s: %w", addr, err)
	}
	return nil
}

func getAll(urls []string) error {
	client, err := newClient()
	if err != nil {
		return err
	}
	for _, u := range urls {
		if err := getRetrying(client, u); err != nil {
			return err
		}
	}
	return nil
}

func newClient() (*http.Client, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if pem, err := os.ReadFile(caFile); err == nil {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("no certificate in %s", caFile)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return &http.Client{Transport: tr, Timeout: 5 * time.Second}, nil
}

func getRetrying(client *http.Client, url string) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		line, err := get(client, url)
		if err == nil {
			fmt.Printf("%s: %s\n", url, line)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("getting %s: %w", url, err)
		}
		fmt.Fprintf(os.Stderr, "kps-smoke: %s: %v (retrying)\n", url, err)
		time.Sleep(2 * time.Second)
	}
}

func get(client *http.Client, url string) (string, error) {
	resp, err := client.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	line, _ := bufio.NewReader(resp.Body).ReadString('\n')
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("status %s", resp.Status)
	}
	return resp.Status + " " + strings.TrimSpace(line), nil
}
