//! `tee FILE...`: copies stdin to stdout and to each file; the files the
//! rescue system has are its devices, so `tee /dev/<disk>` writes the disk
//! (through the same writer as `dd of=`).

use crate::shell::diskwrite::{DiskWriter, WriteError};
use crate::shell::io::{SIGPIPE_STATUS, Stdio, hung_up_by_link_down};
use crate::shell::{Device, ShellEnv};

use super::Flags;

enum Target {
    Disk(DiskWriter),
    Null,
    /// Failed earlier: nothing more goes there.
    Dead,
}

pub async fn run(env: &ShellEnv, args: &[String], io: Stdio) -> i32 {
    let mut flags = Flags::new(args);
    loop {
        match flags.next_flag() {
            Ok(None) => break,
            // Signals and pipe errors keep their defaults here; the flags
            // only change what happens on a terminal or a broken pipe.
            Ok(Some(f)) if matches!(f.as_str(), "i" | "ignore-interrupts" | "p") => {}
            Ok(Some(f)) if f == "output-error" => {
                let _ = flags.value("output-error");
            }
            Ok(Some(f)) if f == "a" || f == "append" => {
                io.stderr
                    .say("tee: --append is not supported by this rescue image\n")
                    .await;
                return 1;
            }
            Ok(Some(f)) => {
                io.stderr
                    .say(format!(
                        "tee: {}\nTry 'tee --help' for more information.\n",
                        Flags::invalid(&f)
                    ))
                    .await;
                return 1;
            }
            Err(msg) => {
                io.stderr
                    .say(format!(
                        "tee: {msg}\nTry 'tee --help' for more information.\n"
                    ))
                    .await;
                return 1;
            }
        }
    }
    let files = flags.operands();
    let disk = env.disk.clone();
    let hooks = env.hooks.clone();
    let write_rate = env.disk_write_rate;
    let devices: Vec<(String, Option<Device>)> = files
        .into_iter()
        .map(|f| (f.clone(), env.device(&f)))
        .collect();
    let stderr = io.stderr.clone();
    let job = tokio::task::spawn_blocking(move || {
        let mut status = 0;
        let mut targets = Vec::new();
        for (name, device) in devices {
            let target = match device {
                Some(Device::Disk) => match DiskWriter::open(&disk, 0, hooks.clone()) {
                    Ok(w) => Target::Disk(w.throttled(write_rate)),
                    Err(e) => {
                        io.stderr.blocking_say(format!("tee: {name}: {e}\n"));
                        status = 1;
                        Target::Dead
                    }
                },
                Some(Device::Null | Device::Zero) => Target::Null,
                None => {
                    io.stderr
                        .blocking_say(format!("tee: {name}: No such file or directory\n"));
                    status = 1;
                    Target::Dead
                }
            };
            targets.push((name, target));
        }
        while let Some(chunk) = io.stdin.blocking_read() {
            if io.stdout.blocking_write(chunk.clone()).is_err() {
                return SIGPIPE_STATUS;
            }
            for (name, target) in &mut targets {
                let Target::Disk(writer) = target else {
                    continue;
                };
                match writer.write(&chunk) {
                    Ok(()) => {}
                    Err(WriteError::LinkDown) => return hung_up_by_link_down(),
                    Err(WriteError::NoSpace { .. }) => {
                        io.stderr
                            .blocking_say(format!("tee: {name}: No space left on device\n"));
                        status = 1;
                        *target = Target::Dead;
                    }
                    Err(WriteError::Io(e)) => {
                        io.stderr.blocking_say(format!("tee: {name}: {e}\n"));
                        status = 1;
                        *target = Target::Dead;
                    }
                }
            }
        }
        status
    });
    match job.await {
        Ok(status) => status,
        Err(e) => {
            stderr.say(format!("tee: {e}\n")).await;
            1
        }
    }
}
