//! `dd` between stdin/stdout, the disk, `/dev/zero` and `/dev/null`, with
//! coreutils' record accounting and transfer statistics.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

use super::text::parse_count;
use crate::disk::Disk;
use crate::shell::diskwrite::{DiskWriter, WriteError};
use crate::shell::io::{Input, Output, SIGPIPE_STATUS, Stdio, hung_up_by_link_down};
use crate::shell::{Device, FaultHooks, ShellEnv};
use crate::timings::WriteRate;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Status {
    #[default]
    Default,
    None,
    Noxfer,
    Progress,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Args {
    input: Option<String>,
    output: Option<String>,
    bs: u64,
    count: Option<u64>,
    skip: u64,
    seek: u64,
    fullblock: bool,
    /// `iflag=count_bytes`: `count=` is in bytes, not blocks.
    count_bytes: bool,
    fsync: bool,
    status: Status,
}

fn parse_args(args: &[String]) -> Result<Args, String> {
    let mut a = Args {
        input: None,
        output: None,
        bs: 512,
        count: None,
        skip: 0,
        seek: 0,
        fullblock: false,
        count_bytes: false,
        fsync: false,
        status: Status::Default,
    };
    let number = |v: &str| parse_count(v).ok_or_else(|| format!("invalid number: '{v}'"));
    for arg in args {
        let Some((key, value)) = arg.split_once('=') else {
            return Err(format!("unrecognized operand '{arg}'"));
        };
        match key {
            "if" => a.input = Some(value.to_string()),
            "of" => a.output = Some(value.to_string()),
            "bs" => {
                a.bs = number(value)?;
                if a.bs == 0 {
                    return Err(format!("invalid number: '{value}'"));
                }
            }
            "count" => a.count = Some(number(value)?),
            "skip" | "iseek" => a.skip = number(value)?,
            "seek" | "oseek" => a.seek = number(value)?,
            "ibs" | "obs" | "cbs" => {
                return Err(format!(
                    "{key}= is not supported by this rescue image, use bs="
                ));
            }
            "iflag" => {
                for flag in value.split(',') {
                    match flag {
                        "fullblock" => a.fullblock = true,
                        "count_bytes" => a.count_bytes = true,
                        "direct" | "nocache" | "noatime" => {}
                        other => return Err(format!("invalid input flag: '{other}'")),
                    }
                }
            }
            "oflag" => {
                for flag in value.split(',') {
                    match flag {
                        "direct" | "dsync" | "sync" | "nocache" => {}
                        other => return Err(format!("invalid output flag: '{other}'")),
                    }
                }
            }
            "conv" => {
                for conv in value.split(',') {
                    match conv {
                        "fsync" | "fdatasync" => a.fsync = true,
                        "notrunc" => {}
                        other => return Err(format!("invalid conversion: '{other}'")),
                    }
                }
            }
            "status" => {
                a.status = match value {
                    "none" => Status::None,
                    "noxfer" => Status::Noxfer,
                    "progress" => Status::Progress,
                    other => return Err(format!("invalid status level: '{other}'")),
                }
            }
            _ => return Err(format!("unrecognized operand '{arg}'")),
        }
    }
    Ok(a)
}

pub async fn run(env: &ShellEnv, args: &[String], io: Stdio) -> i32 {
    let args = match parse_args(args) {
        Ok(a) => a,
        Err(msg) => {
            io.stderr
                .say(format!(
                    "dd: {msg}\nTry 'dd --help' for more information.\n"
                ))
                .await;
            return 1;
        }
    };
    let resolve = |path: &Option<String>| match path {
        None => Ok(None),
        Some(p) => env.device(p).map(Some).ok_or_else(|| p.clone()),
    };
    let (input, output) = match (resolve(&args.input), resolve(&args.output)) {
        (Ok(i), Ok(o)) => (i, o),
        (Err(p), _) | (_, Err(p)) => {
            io.stderr
                .say(format!(
                    "dd: failed to open '{p}': No such file or directory\n"
                ))
                .await;
            return 1;
        }
    };
    let disk = env.disk.clone();
    let hooks = env.hooks.clone();
    let write_rate = env.disk_write_rate;
    let stderr = io.stderr.clone();
    let job = tokio::task::spawn_blocking(move || {
        copy(&args, input, output, &disk, hooks, write_rate, io)
    });
    match job.await {
        Ok(status) => status,
        Err(e) => {
            stderr.say(format!("dd: {e}\n")).await;
            1
        }
    }
}

enum Source {
    Stdin { input: Input, pending: Bytes },
    Disk(File),
    Zero,
}

impl Source {
    /// One read(2): up to `max` bytes, fewer from a pipe.
    fn read(&mut self, max: usize) -> io::Result<Bytes> {
        match self {
            Source::Stdin { input, pending } => {
                if pending.is_empty() {
                    *pending = input.blocking_read().unwrap_or_default();
                }
                let n = max.min(pending.len());
                Ok(pending.split_to(n))
            }
            Source::Disk(file) => {
                let mut buf = BytesMut::zeroed(max);
                let n = file.read(&mut buf)?;
                buf.truncate(n);
                Ok(buf.freeze())
            }
            Source::Zero => Ok(Bytes::from(vec![0u8; max])),
        }
    }

    fn read_block(&mut self, bs: usize, fullblock: bool) -> io::Result<Bytes> {
        let first = self.read(bs)?;
        if !fullblock || first.len() == bs || first.is_empty() {
            return Ok(first);
        }
        let mut block = BytesMut::from(&first[..]);
        while block.len() < bs {
            let more = self.read(bs - block.len())?;
            if more.is_empty() {
                break;
            }
            block.extend_from_slice(&more);
        }
        Ok(block.freeze())
    }
}

enum Sink {
    Stdout(Output),
    Disk(DiskWriter),
    Null,
}

enum SinkError {
    BrokenPipe,
    LinkDown,
    /// Failed after `written` bytes of the block.
    Io(u64, io::Error),
}

impl Sink {
    fn write(&mut self, block: Bytes) -> Result<(), SinkError> {
        match self {
            Sink::Stdout(out) => out.blocking_write(block).map_err(|_| SinkError::BrokenPipe),
            Sink::Null => Ok(()),
            Sink::Disk(writer) => writer.write(&block).map_err(|e| match e {
                WriteError::NoSpace { written } => {
                    SinkError::Io(written, io::Error::from_raw_os_error(28))
                }
                WriteError::LinkDown => SinkError::LinkDown,
                WriteError::Io(e) => SinkError::Io(0, e),
            }),
        }
    }
}

#[derive(Default)]
struct Counters {
    full_in: u64,
    partial_in: u64,
    full_out: u64,
    partial_out: u64,
    bytes: u64,
}

fn copy(
    args: &Args,
    input: Option<Device>,
    output: Option<Device>,
    disk: &Disk,
    hooks: FaultHooks,
    write_rate: Option<WriteRate>,
    io: Stdio,
) -> i32 {
    let Stdio {
        stdin,
        stdout,
        stderr,
    } = io;
    let bs = args.bs as usize;
    let started = Instant::now();
    let mut counters = Counters::default();
    let fail = |msg: String, c: &Counters| {
        stderr.blocking_say(format!("dd: {msg}\n"));
        summary(args.status, c, started.elapsed(), &stderr, false);
        1
    };

    let mut source = match input {
        None => Source::Stdin {
            input: stdin,
            pending: Bytes::new(),
        },
        Some(Device::Null) => Source::Stdin {
            input: Input::empty(),
            pending: Bytes::new(),
        },
        Some(Device::Zero) => Source::Zero,
        Some(Device::Disk) => match disk.open_read().and_then(|mut f| {
            f.seek(SeekFrom::Start(args.skip * args.bs))?;
            Ok(f)
        }) {
            Ok(f) => Source::Disk(f),
            Err(e) => {
                return fail(
                    format!("failed to open '{}': {e}", disk.dev_path()),
                    &counters,
                );
            }
        },
    };
    if matches!(source, Source::Stdin { .. }) && args.skip > 0 {
        let mut left = args.skip * args.bs;
        while left > 0 {
            match source.read(left.min(bs as u64) as usize) {
                Ok(b) if !b.is_empty() => left -= b.len() as u64,
                _ => break,
            }
        }
    }
    let out_name = args
        .output
        .clone()
        .unwrap_or_else(|| "standard output".into());
    let mut sink = match output {
        None => Sink::Stdout(stdout),
        Some(Device::Null) => Sink::Null,
        Some(Device::Zero) => Sink::Null,
        Some(Device::Disk) => match DiskWriter::open(disk, args.seek * args.bs, hooks) {
            Ok(writer) => Sink::Disk(writer.throttled(write_rate)),
            Err(e) => return fail(format!("failed to open '{out_name}': {e}"), &counters),
        },
    };

    let mut last_progress = started;
    let mut printed_progress = false;
    let mut read_bytes = 0u64;
    loop {
        let want = match args.count {
            Some(c) if args.count_bytes => {
                if read_bytes >= c {
                    break;
                }
                (c - read_bytes).min(args.bs) as usize
            }
            Some(c) if counters.full_in + counters.partial_in >= c => break,
            _ => bs,
        };
        let block = match source.read_block(want, args.fullblock) {
            Ok(b) if b.is_empty() => break,
            Ok(b) => b,
            Err(e) => return fail(format!("error reading: {e}"), &counters),
        };
        let len = block.len() as u64;
        read_bytes += len;
        if len == args.bs {
            counters.full_in += 1;
        } else {
            counters.partial_in += 1;
        }
        match sink.write(block) {
            Ok(()) => {
                counters.bytes += len;
                if len == args.bs {
                    counters.full_out += 1;
                } else {
                    counters.partial_out += 1;
                }
            }
            Err(SinkError::BrokenPipe) => return SIGPIPE_STATUS,
            // The session is gone and dd with it (SIGHUP).
            Err(SinkError::LinkDown) => return hung_up_by_link_down(),
            Err(SinkError::Io(done, e)) => {
                counters.bytes += done;
                if done > 0 {
                    counters.partial_out += 1;
                }
                if printed_progress {
                    stderr.blocking_say("\n");
                }
                let reason = io_reason(&e);
                return fail(format!("error writing '{out_name}': {reason}"), &counters);
            }
        }
        if args.status == Status::Progress && last_progress.elapsed() >= Duration::from_secs(1) {
            last_progress = Instant::now();
            printed_progress = true;
            stderr.blocking_say(format!(
                "\r{}",
                transfer_line(counters.bytes, started.elapsed(), true)
            ));
        }
    }
    if args.fsync
        && let Sink::Disk(writer) = &sink
        && let Err(e) = writer.sync()
    {
        return fail(format!("fsync failed for '{out_name}': {e}"), &counters);
    }
    summary(
        args.status,
        &counters,
        started.elapsed(),
        &stderr,
        printed_progress,
    );
    0
}

fn io_reason(e: &io::Error) -> String {
    // Rust appends " (os error N)"; dd prints strerror alone.
    let text = e.to_string();
    match text.find(" (os error") {
        Some(i) => text[..i].to_string(),
        None => text,
    }
}

fn summary(status: Status, c: &Counters, elapsed: Duration, stderr: &Output, after_progress: bool) {
    if status == Status::None {
        return;
    }
    let mut text = String::new();
    if after_progress {
        text.push('\n');
    }
    text.push_str(&format!(
        "{}+{} records in\n{}+{} records out\n",
        c.full_in, c.partial_in, c.full_out, c.partial_out
    ));
    if status != Status::Noxfer {
        text.push_str(&transfer_line(c.bytes, elapsed, false));
        text.push('\n');
    }
    stderr.blocking_say(text);
}

/// `N bytes (8.4 MB, 8.0 MiB) copied, 0.0123 s, 682 MB/s`, as coreutils
/// prints it; progress lines round the time to whole seconds.
pub fn transfer_line(bytes: u64, elapsed: Duration, progress: bool) -> String {
    let secs = elapsed.as_secs_f64();
    let time = if progress {
        format!("{secs:.0} s")
    } else {
        format!("{} s", format_g(secs))
    };
    let rate = if secs > 0.0 {
        format!(
            "{}B/s",
            human(
                bytes as f64 / secs,
                1000.0,
                &["", "k", "M", "G", "T", "P", "E"]
            )
        )
    } else {
        "Infinity B/s".to_string()
    };
    let si = human(bytes as f64, 1000.0, &["", "k", "M", "G", "T", "P", "E"]);
    let iec = human(
        bytes as f64,
        1024.0,
        &["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"],
    );
    if bytes < 1000 {
        let unit = if bytes == 1 { "byte" } else { "bytes" };
        format!("{bytes} {unit} copied, {time}, {rate}")
    } else if bytes < 1024 {
        format!("{bytes} bytes ({si}B) copied, {time}, {rate}")
    } else {
        format!("{bytes} bytes ({si}B, {iec}B) copied, {time}, {rate}")
    }
}

/// gnulib `human_readable` with autoscale and rounding to nearest: one
/// decimal below 10, none above; a space before the unit.
fn human(value: f64, base: f64, prefixes: &[&str]) -> String {
    let mut v = value;
    let mut i = 0;
    while v >= base && i + 1 < prefixes.len() {
        v /= base;
        i += 1;
    }
    if i == 0 {
        return format!("{} ", v.round());
    }
    let tenths = (v * 10.0).round() / 10.0;
    if tenths < 10.0 {
        format!("{tenths:.1} {}", prefixes[i])
    } else if v.round() >= base && i + 1 < prefixes.len() {
        format!("1.0 {}", prefixes[i + 1])
    } else {
        format!("{} {}", v.round(), prefixes[i])
    }
}

/// C's `%g`: six significant digits, trailing zeros removed, exponent form
/// for very small or large values.
pub fn format_g(x: f64) -> String {
    if x == 0.0 {
        return "0".into();
    }
    let sci = format!("{x:.5e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let trim = |s: &str| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s.to_string()
        }
    };
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", trim(mantissa), exp.abs())
    } else {
        trim(&format!("{x:.*}", (5 - exp) as usize))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_g() {
        assert_eq!(format_g(0.0123456789), "0.0123457");
        assert_eq!(format_g(1.5), "1.5");
        assert_eq!(format_g(12.0), "12");
        assert_eq!(format_g(0.00001234), "1.234e-05");
        assert_eq!(format_g(1234567.0), "1.23457e+06");
        assert_eq!(format_g(999999.7), "1e+06");
    }

    #[test]
    fn transfer_lines_follow_coreutils() {
        let ms12 = Duration::from_micros(12_300);
        assert_eq!(
            transfer_line(8_388_608, ms12, false),
            "8388608 bytes (8.4 MB, 8.0 MiB) copied, 0.0123 s, 682 MB/s"
        );
        assert_eq!(
            transfer_line(1_073_741_824, Duration::from_secs(2), false),
            "1073741824 bytes (1.1 GB, 1.0 GiB) copied, 2 s, 537 MB/s"
        );
        assert_eq!(
            transfer_line(512, Duration::from_millis(250), false),
            "512 bytes copied, 0.25 s, 2.0 kB/s"
        );
        assert_eq!(
            transfer_line(1, Duration::from_secs(1), false),
            "1 byte copied, 1 s, 1 B/s"
        );
        assert_eq!(
            transfer_line(123_456_789, Duration::from_millis(2400), true),
            "123456789 bytes (123 MB, 118 MiB) copied, 2 s, 51 MB/s"
        );
    }

    #[test]
    fn operands() {
        let a = parse_args(&[
            "of=/dev/sda".into(),
            "bs=4M".into(),
            "oflag=direct".into(),
            "conv=fsync".into(),
            "status=progress".into(),
        ])
        .unwrap();
        assert_eq!(a.output.as_deref(), Some("/dev/sda"));
        assert_eq!(a.bs, 4 << 20);
        assert!(a.fsync);
        assert_eq!(a.status, Status::Progress);
        assert_eq!(
            parse_args(&["bogus".into()]).unwrap_err(),
            "unrecognized operand 'bogus'"
        );
        assert_eq!(
            parse_args(&["bs=4Q".into()]).unwrap_err(),
            "invalid number: '4Q'"
        );
        assert_eq!(
            parse_args(&["oflag=weird".into()]).unwrap_err(),
            "invalid output flag: 'weird'"
        );
        assert_eq!(
            parse_args(&["status=loud".into()]).unwrap_err(),
            "invalid status level: 'loud'"
        );
    }
}
