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

/// A free TCP port on 127.0.0.1 (bound then released; good enough for tests
/// that start the listener right away).
pub fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}
