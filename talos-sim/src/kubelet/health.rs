//! What the kubelet stand-in reports about its node while a boot lasts, and
//! the faults that change it: the kubelet keeps posting NotReady, goes
//! silent, or falls ill some time after every boot. Only a new boot (a new
//! kubelet) makes it healthy again.

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::faults::{DEFAULT_UNHEALTHY_DELAY_MS, FaultKind, Faults, Target};
use crate::records::{KubeletReport, Record};

/// The kubelet's words when its container runtime stops answering
/// (`not_ready_until_reboot`).
pub const RUNTIME_DOWN: &str = "container runtime is down";

/// The kubelet's words when its pod lifecycle loop stalls
/// (`unhealthy_after_every_boot`).
pub const PLEG_UNHEALTHY: &str =
    "PLEG is not healthy: pleg was last seen active 3m0.512s ago; threshold is 3m0s";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    /// Ready=True.
    Ready,
    /// Ready=False, reason `KubeletNotReady`, with this message.
    NotReady(String),
    /// No status, no Lease, no pod work: the machine is wedged.
    Silent,
}

impl Health {
    /// The message of a Ready=False condition; `None` when Ready.
    pub fn not_ready(&self) -> Option<&str> {
        match self {
            Health::NotReady(message) => Some(message),
            Health::Ready | Health::Silent => None,
        }
    }

    pub fn report(&self) -> KubeletReport {
        match self {
            Health::Ready => KubeletReport::Ready,
            Health::NotReady(_) => KubeletReport::NotReady,
            Health::Silent => KubeletReport::Silent,
        }
    }
}

/// Applies the faults aimed at this boot's kubelet, from the moment it
/// joined until the boot ends (the future is dropped at power-off). A fault
/// armed while the node runs acts at once.
pub async fn follow_faults(
    faults: &Faults,
    server_id: &str,
    node_name: &str,
    record: &Record,
    health: &watch::Sender<Health>,
) {
    let target = Target::node(server_id, Some(node_name));
    let mut unhealthy_at = faults
        .take_for(FaultKind::UnhealthyAfterEveryBoot, target)
        .map(|fault| {
            let delay =
                Duration::from_millis(fault.delay_ms.unwrap_or(DEFAULT_UNHEALTHY_DELAY_MS));
            record.fault_fired(
                FaultKind::UnhealthyAfterEveryBoot,
                format!(
                    "fault unhealthy_after_every_boot: Ready for {} ms, then NotReady ({PLEG_UNHEALTHY})",
                    delay.as_millis()
                ),
            );
            Instant::now() + delay
        });
    let mut runtime_down = false;
    loop {
        // Registered before looking, so a fault armed in between wakes us.
        let armed = faults.armed_later();
        tokio::pin!(armed);
        armed.as_mut().enable();
        let silent = *health.borrow() == Health::Silent;
        if !silent
            && faults
                .take_for(FaultKind::SilentUntilReboot, target)
                .is_some()
        {
            record.fault_fired(
                FaultKind::SilentUntilReboot,
                "fault silent_until_reboot: the machine is wedged, the kubelet posts nothing until it reboots".into(),
            );
            set(health, record, Health::Silent);
        } else if !silent
            && !runtime_down
            && faults
                .take_for(FaultKind::NotReadyUntilReboot, target)
                .is_some()
        {
            runtime_down = true;
            record.fault_fired(
                FaultKind::NotReadyUntilReboot,
                format!("fault not_ready_until_reboot: the node reports NotReady ({RUNTIME_DOWN}) until it reboots"),
            );
            set(health, record, Health::NotReady(RUNTIME_DOWN.into()));
        }
        let deadline = unhealthy_at;
        tokio::select! {
            _ = armed => {}
            _ = tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => {
                unhealthy_at = None;
                if *health.borrow() == Health::Ready {
                    set(health, record, Health::NotReady(PLEG_UNHEALTHY.into()));
                }
            }
        }
    }
}

fn set(health: &watch::Sender<Health>, record: &Record, new: Health) {
    tracing::warn!(report = ?new.report(), "kubelet health changed by a fault");
    record.set_kubelet(new.report());
    health.send_replace(new);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arm(faults: &Faults, body: &str) {
        faults.add(serde_json::from_str(body).unwrap()).unwrap();
    }

    /// Waits (at most `bound`) until `health` holds a value `done` accepts.
    async fn until(
        rx: &mut watch::Receiver<Health>,
        bound: Duration,
        done: impl Fn(&Health) -> bool,
    ) -> Health {
        tokio::time::timeout(bound, rx.wait_for(|h| done(h)))
            .await
            .expect("health did not change in time")
            .expect("sender alive")
            .clone()
    }

    #[tokio::test]
    async fn a_fault_armed_while_the_node_runs_acts_at_once_and_once_per_boot() {
        let faults = Faults::default();
        let record = Record::new("srv-1");
        record.begin_boot("normal", None);
        let (tx, mut rx) = watch::channel(Health::Ready);
        let follow = follow_faults(&faults, "srv-1", "node-a", &record, &tx);
        tokio::pin!(follow);
        let check = async {
            // Aimed at another node: nothing.
            arm(
                &faults,
                r#"{"kind":"not_ready_until_reboot","node_name":"node-b"}"#,
            );
            arm(
                &faults,
                r#"{"kind":"not_ready_until_reboot","node_name":"node-a","count":2}"#,
            );
            let h = until(&mut rx, Duration::from_secs(10), |h| *h != Health::Ready).await;
            assert_eq!(h, Health::NotReady(RUNTIME_DOWN.into()));
            arm(
                &faults,
                r#"{"kind":"silent_until_reboot","server_id":"srv-1"}"#,
            );
            until(&mut rx, Duration::from_secs(10), |h| *h == Health::Silent).await;
        };
        tokio::select! {
            _ = &mut follow => unreachable!("follows until dropped"),
            _ = check => {}
        }
        let remaining: Vec<_> = faults.list().iter().map(|f| f.remaining).collect();
        assert_eq!(
            remaining,
            vec![Some(1), Some(1), Some(0)],
            "one occurrence per boot; the other node's untouched"
        );
        let r = record.snapshot();
        let kinds: Vec<_> = r.faults_fired.iter().map(|f| f.kind).collect();
        assert_eq!(kinds, vec!["not_ready_until_reboot", "silent_until_reboot"]);
        assert_eq!(r.kubelet, Some(KubeletReport::Silent));
        assert!(r.boot_error.unwrap().contains("silent_until_reboot"));
    }

    #[tokio::test(start_paused = true)]
    async fn unhealthy_after_every_boot_waits_its_delay() {
        let faults = Faults::default();
        arm(
            &faults,
            r#"{"kind":"unhealthy_after_every_boot","delay_ms":30000}"#,
        );
        let record = Record::new("srv-1");
        let (tx, mut rx) = watch::channel(Health::Ready);
        let started = Instant::now();
        let follow = follow_faults(&faults, "srv-1", "node-a", &record, &tx);
        tokio::pin!(follow);
        tokio::select! {
            _ = &mut follow => unreachable!("follows until dropped"),
            h = until(&mut rx, Duration::from_secs(60), |h| *h != Health::Ready) => {
                assert_eq!(h, Health::NotReady(PLEG_UNHEALTHY.into()));
            }
        }
        let waited = started.elapsed();
        assert!(
            (Duration::from_secs(30)..Duration::from_secs(31)).contains(&waited),
            "{waited:?}"
        );
        assert_eq!(faults.list()[0].fired, 1);
        assert_eq!(
            faults.list()[0].remaining,
            None,
            "still armed for the next boot"
        );
    }
}
