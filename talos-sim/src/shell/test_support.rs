//! Helpers for the shell's unit tests.

use std::cell::RefCell;
use std::sync::Arc;

use super::io::{Stdio, collector, input_from};
use super::{ShellEnv, run_line};
use crate::disk::Disk;
use crate::model::{Machine, Offer, OfferCpu, OfferDisk, OfferMemory};

thread_local! {
    // Keeps each test's state directory alive until the test thread ends.
    static DIRS: RefCell<Vec<tempfile::TempDir>> = const { RefCell::new(Vec::new()) };
}

pub fn env_with(disk_kind: &str, disk_size: u64) -> Arc<ShellEnv> {
    let dir = tempfile::tempdir().expect("temp dir");
    let offer = Offer {
        name: "EM-TEST".into(),
        disks: vec![OfferDisk {
            capacity: disk_size,
            kind: disk_kind.into(),
        }],
        cpus: vec![OfferCpu {
            name: "cpu".into(),
            core_count: 4,
            thread_count: 8,
        }],
        memories: vec![OfferMemory { capacity: 32 << 30 }],
        tags: vec![],
        gpus: vec![],
    };
    let machine = Machine::from_offer("server-1", &offer).expect("machine");
    let disk = Disk::new(dir.path(), "server-1", &machine.disk_name, disk_size);
    DIRS.with(|d| d.borrow_mut().push(dir));
    ShellEnv::new(disk, machine, "rescue")
}

pub async fn run_input(env: &Arc<ShellEnv>, line: &str, input: Vec<u8>) -> (i32, Vec<u8>, String) {
    let (stdout, out) = collector();
    let (stderr, err) = collector();
    let status = run_line(
        env.clone(),
        line,
        Stdio {
            stdin: input_from(input),
            stdout,
            stderr,
        },
    )
    .await;
    let err = String::from_utf8(err.await.expect("stderr")).expect("utf-8 stderr");
    (status, out.await.expect("stdout"), err)
}

pub async fn run(env: &Arc<ShellEnv>, line: &str) -> (i32, String, String) {
    let (status, out, err) = run_input(env, line, Vec::new()).await;
    (status, String::from_utf8(out).expect("utf-8 stdout"), err)
}

/// Runs a line that must succeed without diagnostics; returns its stdout.
pub async fn run_ok(env: &Arc<ShellEnv>, line: &str) -> String {
    let (status, out, err) = run(env, line).await;
    assert_eq!((status, err.as_str()), (0, ""), "{line}");
    out
}
