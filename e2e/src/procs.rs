//! Child processes of the harness: each in its own process group, output to a
//! log file, terminated (group-wide) when dropped so a failed test leaves no
//! stray servers listening on loopback.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use std::os::unix::process::CommandExt;

pub struct Proc {
    name: String,
    child: Child,
    log: PathBuf,
    /// Set once the process has been reaped: its pid (and group id) may then be
    /// reused by an unrelated process, so no signal may be sent any more.
    reaped: bool,
}

impl Proc {
    /// Starts `cmd` in a new process group with stdout and stderr appended to
    /// `<log_dir>/<name>.log`.
    pub fn spawn(name: &str, cmd: &mut Command, log_dir: &Path) -> Result<Proc> {
        std::fs::create_dir_all(log_dir)?;
        let log = log_dir.join(format!("{name}.log"));
        let out = File::options()
            .create(true)
            .append(true)
            .open(&log)
            .with_context(|| format!("opening {}", log.display()))?;
        let err = out.try_clone()?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .process_group(0)
            .spawn()
            .with_context(|| format!("starting {name} ({:?})", cmd.get_program()))?;
        tracing::info!(%name, pid = child.id(), log = %log.display(), "started");
        Ok(Proc {
            name: name.to_string(),
            child,
            log,
            reaped: false,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// Still running (not exited)?
    pub fn is_running(&mut self) -> bool {
        if self.reaped {
            return false;
        }
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Sends `signal` to the whole process group (nothing once reaped).
    pub fn signal(&self, signal: Signal) {
        if !self.reaped {
            let _ = killpg(Pid::from_raw(self.child.id() as i32), signal);
        }
    }

    /// SIGKILL, as a crash would (no cleanup in the process).
    pub fn kill_hard(&mut self) {
        self.signal(Signal::SIGKILL);
        let _ = self.child.wait();
        self.reaped = true;
    }

    /// SIGTERM, then SIGKILL after `grace`.
    pub fn stop(&mut self, grace: Duration) {
        if self.reaped {
            return;
        }
        if !self.is_running() {
            // The leader exited; its children may still run in the group.
            self.kill_hard();
            return;
        }
        self.signal(Signal::SIGTERM);
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if !self.is_running() {
                self.kill_hard();
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.kill_hard();
    }

    /// The last `n` lines of the log, for error messages.
    pub fn log_tail(&self, n: usize) -> String {
        tail(&self.log, n)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(5));
    }
}

pub fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// An exclusive `flock` on `path` (created if absent), or `None` when another
/// open file holds it. flock locks belong to the open file, so they exclude
/// other holders in this process as well as other processes, and the kernel
/// drops them when the holder dies: a crashed run leaves no stale lease.
pub fn try_lease(path: &Path) -> Result<Option<File>> {
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(e).with_context(|| format!("locking {}", path.display()))
        }
    }
}

/// A TCP port for a listener a child process is about to open.
///
/// Checking a port with `bind(127.0.0.1:0)` and releasing it is not enough
/// with many stacks on one machine: the port comes from the kernel's
/// ephemeral range, where any outbound connection (hundreds of them, to the
/// API servers) may take it before the child binds, and Karpenter core binds
/// its metrics and probe ports on the wildcard address, which collides with
/// any socket on that port. So ports are handed out from below the ephemeral
/// range, which the kernel never assigns by itself, and each is leased with
/// an exclusive `flock` on `<tmp>/kps-e2e-ports/<port>.lock`, held until this
/// process exits: no other harness process hands it out meanwhile, and the
/// kernel drops the lease of a crashed run.
pub fn free_port() -> Result<u16> {
    ports::lease()
}

mod ports {
    use std::fs::File;
    use std::net::{Ipv4Addr, TcpListener};
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicU32, Ordering};

    use anyhow::{Context, Result, bail};

    /// The range handed out, when the kernel's ephemeral range does not
    /// overlap it (it starts at 32768 by default).
    const FIRST: u16 = 20000;
    const LAST: u16 = 32767;

    /// Leases held for this process's lifetime.
    static HELD: Mutex<Vec<File>> = Mutex::new(Vec::new());
    /// Where the next probe starts, so one process does not re-probe the
    /// ports it already holds.
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);

    pub fn lease() -> Result<u16> {
        let (eph_lo, eph_hi) = ephemeral_range();
        let dir = std::env::temp_dir().join("kps-e2e-ports");
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let span = u32::from(LAST - FIRST) + 1;
        // Processes start at different places (by pid) so they rarely probe
        // the same locks first.
        let _ = NEXT.compare_exchange(
            u32::MAX,
            std::process::id().wrapping_mul(7919) % span,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
        for _ in 0..span {
            let i = NEXT.fetch_add(1, Ordering::Relaxed) % span;
            let port = FIRST + i as u16;
            if (eph_lo..=eph_hi).contains(&port) {
                continue;
            }
            let Some(file) = super::try_lease(&dir.join(format!("{port}.lock")))? else {
                continue;
            };
            // Something outside the leases (another program) may hold it:
            // the wildcard bind fails when any socket has the port.
            if TcpListener::bind((Ipv4Addr::UNSPECIFIED, port)).is_err() {
                continue;
            }
            HELD.lock().expect("port leases").push(file);
            return Ok(port);
        }
        bail!(
            "no free port in {FIRST}..={LAST} outside the ephemeral range (leases in {})",
            dir.display()
        )
    }

    /// The kernel's ephemeral port range (Linux's default when unreadable).
    fn ephemeral_range() -> (u16, u16) {
        std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .ok()
            .and_then(|s| parse_range(&s))
            .unwrap_or((32768, 60999))
    }

    fn parse_range(s: &str) -> Option<(u16, u16)> {
        let mut it = s.split_whitespace().map(|p| p.parse::<u16>().ok());
        Some((it.next()??, it.next()??))
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn the_proc_range_parses() {
            assert_eq!(parse_range("32768\t60999\n"), Some((32768, 60999)));
            assert_eq!(parse_range("garbage"), None);
        }

        #[test]
        fn leased_ports_are_distinct_and_outside_the_ephemeral_range() {
            let (lo, hi) = ephemeral_range();
            let ports: Vec<u16> = (0..50).map(|_| lease().unwrap()).collect();
            let distinct: std::collections::BTreeSet<_> = ports.iter().collect();
            assert_eq!(distinct.len(), ports.len(), "{ports:?}");
            for p in &ports {
                assert!(!(lo..=hi).contains(p), "{p} is in the ephemeral range");
                assert!((FIRST..=LAST).contains(p));
                // The lease excludes other holders of the lock file.
                let f = File::options()
                    .write(true)
                    .open(std::env::temp_dir().join(format!("kps-e2e-ports/{p}.lock")))
                    .unwrap();
                assert!(matches!(
                    f.try_lock(),
                    Err(std::fs::TryLockError::WouldBlock)
                ));
            }
        }
    }
}
