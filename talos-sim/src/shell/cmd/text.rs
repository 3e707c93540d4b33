//! Small coreutils/util-linux commands: `sha256sum`, `head`, `cat`, `echo`,
//! `uname`, `sync` and `blockdev`.

use std::fs::File;
use std::io::{self, Read};

use bytes::Bytes;
use sha2::{Digest, Sha256};

use super::{Flags, emit};
use crate::disk::Disk;
use crate::image::hex;
use crate::shell::io::{BrokenPipe, Input, Output, SIGPIPE_STATUS, Stdio, pipe};
use crate::shell::{Device, ShellEnv};
use tokio::task::JoinHandle;

const KERNEL_RELEASE: &str = "6.8.0-49-generic";
const KERNEL_VERSION: &str = "#49-Ubuntu SMP PREEMPT_DYNAMIC Mon Nov  4 02:06:24 UTC 2024";

/// coreutils block counts: `4M`, `4MiB`, `4MB`, `512`, `1K`, `2b`...
pub fn parse_count(text: &str) -> Option<u64> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, suffix) = text.split_at(split);
    let n: u64 = digits.parse().ok()?;
    let powers = ["K", "M", "G", "T", "P", "E"];
    let mult = match suffix {
        "" | "c" => 1,
        "w" => 2,
        "b" => 512,
        s => {
            let letter = s.get(..1)?.to_ascii_uppercase();
            let exp = powers.iter().position(|p| *p == letter)? as u32 + 1;
            match &s[1..] {
                "" | "iB" => 1024u64.checked_pow(exp)?,
                "B" => 1000u64.checked_pow(exp)?,
                _ => return None,
            }
        }
    };
    n.checked_mul(mult)
}

/// Where a file operand reads from.
enum Source {
    Stdin,
    Disk,
    Zero,
    Empty,
}

fn source(env: &ShellEnv, path: &str) -> Option<Source> {
    if path == "-" {
        return Some(Source::Stdin);
    }
    env.device(path).map(|d| match d {
        Device::Disk => Source::Disk,
        Device::Zero => Source::Zero,
        Device::Null => Source::Empty,
    })
}

enum StreamError {
    Pipe,
    Io(io::Error),
}

/// Opens a file operand as a stream of chunks. The disk is read on a blocking
/// thread that stops as soon as the reader drops the stream.
fn open(src: Source, disk: &Disk, stdin: &Input) -> (Input, Option<JoinHandle<io::Result<()>>>) {
    match src {
        Source::Stdin => (stdin.clone(), None),
        Source::Empty => (Input::empty(), None),
        Source::Zero => {
            let (out, input) = pipe();
            tokio::spawn(async move {
                let zeros = Bytes::from(vec![0u8; 1 << 16]);
                while out.write(zeros.clone()).await.is_ok() {}
            });
            (input, None)
        }
        Source::Disk => {
            let (out, input) = pipe();
            let disk = disk.clone();
            let reader = tokio::task::spawn_blocking(move || {
                let mut file: File = disk.open_read()?;
                let mut buf = vec![0u8; 1 << 20];
                loop {
                    let n = file.read(&mut buf)?;
                    if n == 0
                        || out
                            .blocking_write(Bytes::copy_from_slice(&buf[..n]))
                            .is_err()
                    {
                        return Ok(());
                    }
                }
            });
            (input, Some(reader))
        }
    }
}

/// Reads a stream up to `limit` bytes, handing each chunk to `each`.
async fn consume(
    src: Source,
    disk: &Disk,
    stdin: &Input,
    limit: Option<u64>,
    mut each: impl AsyncSink,
) -> Result<(), StreamError> {
    let (input, reader) = open(src, disk, stdin);
    let mut left = limit.unwrap_or(u64::MAX);
    let mut result = Ok(());
    while left > 0 {
        let Some(mut chunk) = input.read().await else {
            break;
        };
        if chunk.len() as u64 > left {
            chunk.truncate(left as usize);
        }
        left -= chunk.len() as u64;
        if each.take(chunk).await.is_err() {
            result = Err(StreamError::Pipe);
            break;
        }
    }
    drop(input);
    if let Some(reader) = reader {
        match reader.await {
            Ok(Err(e)) => return Err(StreamError::Io(e)),
            Err(e) => return Err(StreamError::Io(io::Error::other(e.to_string()))),
            Ok(Ok(())) => {}
        }
    }
    result
}

/// Where `consume` puts chunks.
trait AsyncSink {
    async fn take(&mut self, chunk: Bytes) -> Result<(), BrokenPipe>;
}

impl AsyncSink for &Output {
    async fn take(&mut self, chunk: Bytes) -> Result<(), BrokenPipe> {
        self.write(chunk).await
    }
}

impl AsyncSink for &mut Sha256 {
    async fn take(&mut self, chunk: Bytes) -> Result<(), BrokenPipe> {
        self.update(&chunk);
        Ok(())
    }
}

async fn copy_to(
    src: Source,
    env: &ShellEnv,
    io: &Stdio,
    limit: Option<u64>,
) -> Result<(), StreamError> {
    consume(src, &env.disk, &io.stdin, limit, &io.stdout).await
}

pub async fn sha256sum(env: &ShellEnv, args: &[String], io: Stdio) -> i32 {
    let mut marker = ' ';
    let mut flags = Flags::new(args);
    loop {
        match flags.next_flag() {
            Ok(None) => break,
            Ok(Some(f)) if f == "b" || f == "binary" => marker = '*',
            Ok(Some(f)) if f == "t" || f == "text" => marker = ' ',
            Ok(Some(f)) => return usage(&io, "sha256sum", &Flags::invalid(&f)).await,
            Err(msg) => return usage(&io, "sha256sum", &msg).await,
        }
    }
    let mut files = flags.operands();
    if files.is_empty() {
        files.push("-".into());
    }
    let mut status = 0;
    for file in files {
        let Some(src) = source(env, &file) else {
            io.stderr
                .say(format!("sha256sum: {file}: No such file or directory\n"))
                .await;
            status = 1;
            continue;
        };
        let mut hasher = Sha256::new();
        if let Err(StreamError::Io(e)) = consume(src, &env.disk, &io.stdin, None, &mut hasher).await
        {
            io.stderr.say(format!("sha256sum: {file}: {e}\n")).await;
            status = 1;
            continue;
        }
        let digest = hasher.finalize();
        if emit(&io.stdout, format!("{} {marker}{file}\n", hex(&digest))).await != 0 {
            return SIGPIPE_STATUS;
        }
    }
    status
}

pub async fn head(env: &ShellEnv, args: &[String], io: Stdio) -> i32 {
    let mut bytes = None;
    let mut lines = 10u64;
    let mut flags = Flags::new(args);
    loop {
        let flag = match flags.next_flag() {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(msg) => return usage(&io, "head", &msg).await,
        };
        let value = match flag.as_str() {
            "c" | "bytes" | "n" | "lines" => match flags.value(&flag) {
                Ok(v) => v,
                Err(msg) => return usage(&io, "head", &msg).await,
            },
            "q" | "quiet" | "silent" => continue,
            other => return usage(&io, "head", &Flags::invalid(other)).await,
        };
        let Some(n) = parse_count(&value) else {
            let what = if flag.starts_with('c') || flag == "bytes" {
                "bytes"
            } else {
                "lines"
            };
            io.stderr
                .say(format!("head: invalid number of {what}: '{value}'\n"))
                .await;
            return 1;
        };
        if flag == "c" || flag == "bytes" {
            bytes = Some(n);
        } else {
            lines = n;
            bytes = None;
        }
    }
    let files = flags.operands();
    let file = match files.as_slice() {
        [] => "-".to_string(),
        [one] => one.clone(),
        _ => {
            io.stderr
                .say("head: only one file per call is supported by this rescue image\n")
                .await;
            return 1;
        }
    };
    let Some(src) = source(env, &file) else {
        io.stderr
            .say(format!(
                "head: cannot open '{file}' for reading: No such file or directory\n"
            ))
            .await;
        return 1;
    };
    let result = match bytes {
        Some(n) => copy_to(src, env, &io, Some(n)).await,
        None => head_lines(src, env, &io, lines).await,
    };
    finish("head", &file, result, &io).await
}

async fn head_lines(
    src: Source,
    env: &ShellEnv,
    io: &Stdio,
    lines: u64,
) -> Result<(), StreamError> {
    let (input, reader) = open(src, &env.disk, &io.stdin);
    let mut left = lines;
    let mut result = Ok(());
    while left > 0 {
        let Some(chunk) = input.read().await else {
            break;
        };
        let mut end = chunk.len();
        for (i, b) in chunk.iter().enumerate() {
            if *b == b'\n' {
                left -= 1;
                if left == 0 {
                    end = i + 1;
                    break;
                }
            }
        }
        if io.stdout.write(chunk.slice(..end)).await.is_err() {
            result = Err(StreamError::Pipe);
            break;
        }
    }
    drop(input);
    if let Some(reader) = reader
        && let Ok(Err(e)) = reader.await
    {
        return Err(StreamError::Io(e));
    }
    result
}

async fn finish(tool: &str, file: &str, result: Result<(), StreamError>, io: &Stdio) -> i32 {
    match result {
        Ok(()) => 0,
        Err(StreamError::Pipe) => SIGPIPE_STATUS,
        Err(StreamError::Io(e)) => {
            io.stderr
                .say(format!("{tool}: error reading '{file}': {e}\n"))
                .await;
            1
        }
    }
}

pub async fn cat(env: &ShellEnv, args: &[String], io: Stdio) -> i32 {
    let mut files: Vec<String> = args.to_vec();
    if let Some(flag) = files.iter().find(|f| f.len() > 1 && f.starts_with('-')) {
        return usage(&io, "cat", &Flags::invalid(flag.trim_start_matches('-'))).await;
    }
    if files.is_empty() {
        files.push("-".into());
    }
    let mut status = 0;
    for file in files {
        let Some(src) = source(env, &file) else {
            io.stderr
                .say(format!("cat: {file}: No such file or directory\n"))
                .await;
            status = 1;
            continue;
        };
        match finish("cat", &file, copy_to(src, env, &io, None).await, &io).await {
            0 => {}
            SIGPIPE_STATUS => return SIGPIPE_STATUS,
            s => status = s,
        }
    }
    status
}

pub async fn echo(args: &[String], io: &Stdio) -> i32 {
    let mut newline = true;
    let mut escapes = false;
    let mut words = args;
    while let Some(first) = words.first() {
        match first.as_str() {
            "-n" => newline = false,
            "-e" => escapes = true,
            "-E" => escapes = false,
            _ => break,
        }
        words = &words[1..];
    }
    let mut text = words.join(" ");
    if escapes {
        text = text
            .replace("\\n", "\n")
            .replace("\\t", "\t")
            .replace("\\\\", "\\");
    }
    if newline {
        text.push('\n');
    }
    emit(&io.stdout, text).await
}

pub async fn uname(env: &ShellEnv, args: &[String], io: &Stdio) -> i32 {
    let arch = env.machine.uname_arch.as_str();
    let fields = [
        ('s', "Linux"),
        ('n', env.hostname.as_str()),
        ('r', KERNEL_RELEASE),
        ('v', KERNEL_VERSION),
        ('m', arch),
        ('p', arch),
        ('i', arch),
        ('o', "GNU/Linux"),
    ];
    let mut wanted = Vec::new();
    let mut flags = Flags::new(args);
    loop {
        match flags.next_flag() {
            Ok(None) => break,
            Ok(Some(f)) if f == "a" || f == "all" => wanted.extend(fields.iter().map(|(c, _)| *c)),
            Ok(Some(f)) => {
                let long = [
                    ("kernel-name", 's'),
                    ("nodename", 'n'),
                    ("kernel-release", 'r'),
                    ("kernel-version", 'v'),
                    ("machine", 'm'),
                    ("processor", 'p'),
                    ("hardware-platform", 'i'),
                    ("operating-system", 'o'),
                ];
                let letter = long
                    .iter()
                    .find(|(name, _)| *name == f)
                    .map(|(_, c)| *c)
                    .or_else(|| {
                        f.chars()
                            .next()
                            .filter(|c| f.len() == 1 && fields.iter().any(|(l, _)| l == c))
                    });
                match letter {
                    Some(c) => wanted.push(c),
                    None => return usage(io, "uname", &Flags::invalid(&f)).await,
                }
            }
            Err(msg) => return usage(io, "uname", &msg).await,
        }
    }
    if let Some(extra) = flags.operands().first() {
        return usage(io, "uname", &format!("extra operand '{extra}'")).await;
    }
    if wanted.is_empty() {
        wanted.push('s');
    }
    let line: Vec<&str> = fields
        .iter()
        .filter(|(c, _)| wanted.contains(c))
        .map(|(_, v)| *v)
        .collect();
    emit(&io.stdout, format!("{}\n", line.join(" "))).await
}

pub async fn sync(env: &ShellEnv, io: &Stdio) -> i32 {
    let disk = env.disk.clone();
    let synced =
        tokio::task::spawn_blocking(move || match File::options().write(true).open(&disk.path) {
            Ok(f) => f.sync_all(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        })
        .await;
    match synced {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            io.stderr.say(format!("sync: error syncing: {e}\n")).await;
            1
        }
        Err(_) => 1,
    }
}

pub async fn blockdev(env: &ShellEnv, args: &[String], io: &Stdio) -> i32 {
    let (commands, devices): (Vec<&String>, Vec<&String>) =
        args.iter().partition(|a| a.starts_with("--"));
    if commands.is_empty() || devices.len() != 1 {
        io.stderr
            .say("Usage:\n blockdev --report [devices]\n blockdev [-v|-q] commands devices\n")
            .await;
        return 1;
    }
    let device = devices[0];
    if env.device(device) != Some(Device::Disk) {
        io.stderr
            .say(format!(
                "blockdev: cannot open {device}: No such file or directory\n"
            ))
            .await;
        return 1;
    }
    let mut out = String::new();
    for command in commands {
        match command.as_str() {
            "--getsize64" => out.push_str(&format!("{}\n", env.disk.size)),
            "--getsz" => out.push_str(&format!("{}\n", env.disk.size / 512)),
            "--getss" => out.push_str("512\n"),
            "--getbsz" => out.push_str("4096\n"),
            "--rereadpt" | "--flushbufs" => {}
            other => {
                io.stderr
                    .say(format!("blockdev: Unknown command: {other}\n"))
                    .await;
                return 1;
            }
        }
    }
    emit(&io.stdout, out).await
}

async fn usage(io: &Stdio, tool: &str, msg: &str) -> i32 {
    io.stderr
        .say(format!(
            "{tool}: {msg}\nTry '{tool} --help' for more information.\n"
        ))
        .await;
    1
}
