//! The stack's replica lifecycle: which replica leads, killing and
//! restarting a replica's processes (as a crashed or rescheduled pod), and
//! reading their metrics.

use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};

use super::*;

impl Stack {
    /// The Deployment's replicas, in order (the first one's processes are
    /// named [`PROVIDER`] and [`BRIDGE`]).
    pub fn replicas(&self) -> &[Replica] {
        &self.replicas
    }

    pub(super) fn replica(&self, i: usize) -> Result<&Replica> {
        self.replicas
            .get(i)
            .with_context(|| format!("no replica {i} (the stack runs {})", self.replicas.len()))
    }

    /// Replaces process `name` with a fresh `cmd`: the old one is stopped
    /// first if still running (it holds the socket and ports), the log is
    /// appended to the same file and the place in the teardown order is kept.
    pub(super) fn respawn(&mut self, name: &str, mut cmd: Command) -> Result<()> {
        let at = self.procs.iter().position(|p| p.name() == name);
        if let Some(i) = at {
            self.procs[i].stop(Duration::from_secs(5));
        }
        let fresh = Proc::spawn(name, &mut cmd, &self.logs)?;
        match at {
            Some(i) => self.procs[i] = fresh,
            None => self.procs.push(fresh),
        }
        Ok(())
    }

    /// SIGKILLs the first replica's provider (its whole process group), as
    /// a crash would: no shutdown code runs. The bridge keeps running and
    /// reconnects to the socket once a provider serves it again.
    pub fn kill_provider(&mut self) -> Result<()> {
        let name = self.replica(0)?.provider_proc.clone();
        let p = self
            .proc_mut(&name)
            .context("the provider is not running")?;
        let pid = p.pid();
        p.kill_hard();
        tracing::info!(pid, "provider SIGKILLed");
        Ok(())
    }

    /// Starts the first replica's provider again with exactly the
    /// arguments, environment, socket and ports of the first start (log
    /// appended to the same file), as the kubelet restarts a container.
    pub fn start_provider(&mut self) -> Result<()> {
        let r = self.replica(0)?;
        let (name, cmd) = (r.provider_proc.clone(), provider_command(r, &self.opts));
        self.respawn(&name, cmd)
    }

    /// SIGKILLs the first replica's bridge (Karpenter core) and starts it
    /// again with the same environment: a restart of the Karpenter
    /// container. The new process is a new leader election candidate: the
    /// killed one never released the Lease, so it leads again only once
    /// the Lease expired (about 15 s) and then re-announces leadership to
    /// the provider.
    pub fn restart_bridge(&mut self) -> Result<()> {
        let r = self.replica(0)?;
        let (name, cmd) = (r.bridge_proc.clone(), bridge_command(r, &self.opts));
        self.proc_mut(&name)
            .context("the bridge is not running")?
            .kill_hard();
        self.respawn(&name, cmd)
    }

    /// SIGKILL then restart: a controller crash and its Deployment restarting it.
    pub fn crash_provider(&mut self) -> Result<()> {
        self.kill_provider()?;
        self.start_provider()
    }

    /// SIGKILLs both processes of replica `i` at once, as the loss of its
    /// node would: nothing of the pod runs any more, the Lease is not
    /// released.
    pub fn kill_replica(&mut self, i: usize) -> Result<()> {
        let r = self.replica(i)?.clone();
        let names = [r.bridge_proc.as_str(), r.provider_proc.as_str()];
        // Signal both before reaping either, so neither outlives the other.
        for p in self.procs.iter().filter(|p| names.contains(&p.name())) {
            p.signal(nix::sys::signal::Signal::SIGKILL);
        }
        for name in names {
            self.proc_mut(name)
                .with_context(|| format!("{name} is not running"))?
                .kill_hard();
        }
        self.down.insert(i);
        tracing::info!(replica = i, pod = %r.pod_name, "replica SIGKILLed");
        Ok(())
    }

    /// Starts replica `i` again (the same pod: name, sockets, ports) and
    /// waits for its containers' startup probes.
    pub async fn start_replica(&mut self, i: usize) -> Result<()> {
        let r = self.replica(i)?.clone();
        self.respawn(&r.provider_proc, provider_command(&r, &self.opts))?;
        self.respawn(&r.bridge_proc, bridge_command(&r, &self.opts))?;
        self.down.remove(&i);
        self.wait_replica_started(i).await
    }

    /// Waits until the startup probes of replica `i`'s containers pass (the
    /// provider's first: the bridge waits for it), failing early with the
    /// log tail if a process exits.
    pub(super) async fn wait_replica_started(&mut self, i: usize) -> Result<()> {
        let r = self.replica(i)?.clone();
        for (name, c) in [(&r.provider_proc, &r.provider), (&r.bridge_proc, &r.bridge)] {
            let Some(probe) = c.startup_probe.clone() else {
                continue;
            };
            let url = format!("http://127.0.0.1:{}{}", probe.port, probe.path);
            let start = std::time::Instant::now();
            loop {
                let p = self
                    .proc_mut(name)
                    .with_context(|| format!("{name} was never started"))?;
                if !p.is_running() {
                    bail!(
                        "{name} exited before its startup probe passed:\n{}",
                        p.log_tail(40)
                    );
                }
                if let Ok((status, _)) = http_get(&url).await
                    && (200..400).contains(&status)
                {
                    tracing::info!(%name, elapsed_ms = start.elapsed().as_millis() as u64, "startup probe passed");
                    break;
                }
                if start.elapsed() > probe.budget {
                    bail!(
                        "{name}: startup probe {url} still failing after {:?} (the kubelet would restart the container):\n{}",
                        probe.budget,
                        p.log_tail(40)
                    );
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        Ok(())
    }

    /// The `holderIdentity` of Karpenter's leader election Lease (None
    /// while nobody holds it). On one host every candidate has the same
    /// host name prefix, so the identity tells *that* the leader changed,
    /// not which replica leads: see [`Stack::leaders`].
    pub async fn lease_holder(&self) -> Result<Option<String>> {
        use k8s_openapi::api::coordination::v1::Lease;
        let api: Api<Lease> = Api::namespaced(self.client.clone(), &self.lease.0);
        Ok(api
            .get_opt(&self.lease.1)
            .await?
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
            .filter(|h| !h.is_empty()))
    }

    /// `/metrics` of the release's one Pod, from the Service port `port`
    /// (a stack in a cluster).
    async fn in_cluster_metrics(&self, i: usize, port: &str) -> Result<String> {
        ensure!(i == 0, "a stack in a cluster has one replica");
        super::in_cluster::get_through_service(
            &self.client,
            super::NAMESPACE,
            super::in_cluster::RELEASE,
            port,
            "/metrics",
        )
        .await
    }

    /// The provider's `/metrics` of replica `i`.
    pub async fn provider_metrics(&self, i: usize) -> Result<String> {
        if self.opts.in_cluster.is_some() {
            return self.in_cluster_metrics(i, "http-provider").await;
        }
        let url = self.replica(i)?.provider_metrics_url()?;
        let (status, text) = http_get(&url).await.with_context(|| format!("GET {url}"))?;
        ensure!(status == 200, "GET {url} answered {status}");
        Ok(text)
    }

    /// Karpenter core's `/metrics` of replica `i`.
    pub async fn bridge_metrics(&self, i: usize) -> Result<String> {
        if self.opts.in_cluster.is_some() {
            return self.in_cluster_metrics(i, "http-metrics").await;
        }
        let url = self.replica(i)?.bridge_metrics_url()?;
        let (status, text) = http_get(&url).await.with_context(|| format!("GET {url}"))?;
        ensure!(status == 200, "GET {url} answered {status}");
        Ok(text)
    }

    /// The running replicas whose provider reports that it leads
    /// (`karpenter_scaleway_leader 1`, set when its bridge told it so). More
    /// than one would be two replicas acting at once.
    pub async fn leaders(&self) -> Result<Vec<usize>> {
        let mut out = Vec::new();
        for i in (0..self.replicas.len()).filter(|i| !self.down.contains(i)) {
            let text = self.provider_metrics(i).await?;
            let v = metric_value(&text, "karpenter_scaleway_leader")
                .context("the provider's /metrics has no karpenter_scaleway_leader")?;
            if v == 1.0 {
                out.push(i);
            }
        }
        Ok(out)
    }

    /// Waits until the Lease is held and exactly one running replica's
    /// provider leads; returns that replica. Fails at once if two lead.
    pub async fn wait_leader(&self, timeout: Duration) -> Result<usize> {
        wait::until(
            "one replica holding the lease and leading its provider",
            timeout,
            Duration::from_millis(250),
            || async {
                let leaders = self.leaders().await?;
                ensure!(leaders.len() <= 1, "replicas {leaders:?} all lead");
                let held = self.lease_holder().await?.is_some();
                Ok(leaders.first().copied().filter(|_| held))
            },
        )
        .await
    }
}
