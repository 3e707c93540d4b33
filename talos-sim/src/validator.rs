//! Talos' own validation of a machine config, delegated to an external
//! command: `talos-config validate` (talos-sim/conformance/cmd/talos-config),
//! which links Talos' machinery and validates like a node in maintenance mode
//! (configloader, then Validate in metal mode; strict, so warnings of the
//! v1alpha1 document are errors too). talos-sim keeps its own checks on top:
//! they are stricter about what the provider must send (a well-formed
//! per-node bootstrap token, a worker, a hostname).
//!
//! The command reads the config on stdin and answers by exit status: 0 valid
//! (warnings on stdout, one per line), 1 invalid, 2 unparsable; on 1 and 2
//! stderr is exactly Talos' error message. Talos 1.13 answers both the same
//! way, so talos-sim does too (see [`crate::talos_api`]).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::io::AsyncWriteExt;

/// A validation run that takes longer is a broken validator, not a verdict.
const TIMEOUT: Duration = Duration::from_secs(30);

/// What Talos' machinery says about a config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Valid {
        warnings: Vec<String>,
    },
    /// Loads but fails validation; Talos' message.
    Invalid(String),
    /// Does not load (YAML, unknown keys or kinds); Talos' message.
    Unparsable(String),
}

#[derive(Debug, Clone)]
pub struct ConfigValidator {
    program: PathBuf,
}

impl ConfigValidator {
    /// Fails if `program` is not an executable file.
    pub fn new(program: impl Into<PathBuf>) -> anyhow::Result<Self> {
        let program = program.into();
        let meta = std::fs::metadata(&program)
            .with_context(|| format!("config validator {}", program.display()))?;
        if !meta.is_file()
            || std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o111 == 0
        {
            bail!(
                "config validator {} is not an executable file",
                program.display()
            );
        }
        Ok(Self { program })
    }

    pub fn program(&self) -> &Path {
        &self.program
    }

    /// Runs `<program> validate` with the config on stdin.
    pub async fn check(&self, config: &[u8]) -> anyhow::Result<Verdict> {
        tokio::time::timeout(TIMEOUT, self.run(config))
            .await
            .with_context(|| {
                format!(
                    "{} validate did not answer within {TIMEOUT:?}",
                    self.program.display()
                )
            })?
    }

    /// Starts the validator. "Text file busy" is retried a few times: a
    /// program written just before (a test's script) can still be open for
    /// writing in a process another thread is forking, until that exec.
    async fn spawn(&self) -> std::io::Result<tokio::process::Child> {
        let mut attempts = 0;
        loop {
            let spawned = tokio::process::Command::new(&self.program)
                .arg("validate")
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .kill_on_drop(true)
                .spawn();
            match spawned {
                Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && attempts < 10 => {
                    attempts += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
                other => return other,
            }
        }
    }

    async fn run(&self, config: &[u8]) -> anyhow::Result<Verdict> {
        let mut child = self
            .spawn()
            .await
            .with_context(|| format!("starting {}", self.program.display()))?;
        let mut stdin = child.stdin.take().context("validator stdin")?;
        let written = stdin.write_all(config).await;
        drop(stdin);
        let out = child.wait_with_output().await?;
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        if let Err(err) = written {
            // A validator that exits before reading its whole input (it
            // crashed, or refused to start) closes the pipe: its exit
            // status and stderr say why, whichever of the write and the exit
            // came first. Only a success without reading everything is no
            // verdict at all.
            if err.kind() != std::io::ErrorKind::BrokenPipe {
                return Err(err).context("writing the config to the validator");
            }
            if out.status.success() {
                bail!(
                    "{} validate exited 0 without reading the whole config",
                    self.program.display()
                );
            }
        }
        match out.status.code() {
            Some(0) => Ok(Verdict::Valid {
                warnings: String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .filter(|l| !l.is_empty())
                    .map(str::to_string)
                    .collect(),
            }),
            Some(1) => Ok(Verdict::Invalid(stderr)),
            Some(2) => Ok(Verdict::Unparsable(stderr)),
            _ => bail!(
                "{} validate failed ({}): {}",
                self.program.display(),
                out.status,
                stderr.trim()
            ),
        }
    }
}

#[cfg(test)]
#[path = "validator_tests.rs"]
pub(crate) mod tests;
