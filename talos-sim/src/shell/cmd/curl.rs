//! `curl`: a real HTTP download streamed to stdout, with curl's exit codes and
//! messages for the failures an install can meet.

use std::error::Error as _;
use std::time::{Duration, Instant};

use futures::StreamExt;

use bytes::Bytes;

use super::Flags;
use crate::faults::FaultKind;
use crate::shell::io::Stdio;
use crate::shell::{FaultHooks, ShellEnv};

const USER_AGENT: &str = "curl/8.5.0";

#[derive(Debug, Default)]
struct Args {
    fail: bool,
    silent: bool,
    show_error: bool,
    location: bool,
    discard: bool,
    retries: u32,
    retry_delay: Option<u64>,
    retry_connrefused: bool,
    connect_timeout: Option<f64>,
    max_time: Option<f64>,
    url: String,
}

/// A failed transfer, as curl reports it.
#[derive(Debug, PartialEq)]
struct Failure {
    code: i32,
    message: String,
    /// Whether `--retry` may try again.
    transient: bool,
}

impl Failure {
    fn new(code: i32, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            transient: false,
        }
    }

    fn transient(mut self) -> Self {
        self.transient = true;
        self
    }
}

pub async fn run(env: &ShellEnv, args: &[String], io: &Stdio) -> i32 {
    let args = match parse_args(args) {
        Ok(a) => a,
        Err((code, msg)) => {
            io.stderr.say(msg).await;
            return code;
        }
    };
    let report = !args.silent || args.show_error;
    let mut delay = Duration::from_secs(args.retry_delay.unwrap_or(1));
    let mut left = args.retries;
    let mut corrupt = env
        .hooks
        .armed(FaultKind::CorruptDownload)
        .then_some(Corruptor { at: None });
    loop {
        let mut written = 0u64;
        match transfer(&args, io, &mut written, &env.hooks, &mut corrupt).await {
            Ok(()) => return 0,
            Err(f) => {
                let retryable = f.transient || (args.retry_connrefused && f.code == 7);
                if left > 0 && retryable && written == 0 {
                    if report {
                        let unit = if delay.as_secs() == 1 {
                            "second"
                        } else {
                            "seconds"
                        };
                        io.stderr
                            .say(format!(
                                "Warning: Problem : {}. Will retry in {} {unit}. {left} retries left.\n",
                                if f.code == 22 { "HTTP error" } else { "timeout" },
                                delay.as_secs()
                            ))
                            .await;
                    }
                    tokio::time::sleep(delay).await;
                    if args.retry_delay.is_none() {
                        delay = (delay * 2).min(Duration::from_secs(600));
                    }
                    left -= 1;
                    continue;
                }
                if report {
                    io.stderr
                        .say(format!("curl: ({}) {}\n", f.code, f.message))
                        .await;
                }
                return f.code;
            }
        }
    }
}

fn parse_args(argv: &[String]) -> Result<Args, (i32, String)> {
    let usage = |m: String| {
        (
            2,
            format!("curl: {m}\ncurl: try 'curl --help' for more information\n"),
        )
    };
    let mut a = Args::default();
    let mut flags = Flags::new(argv);
    while let Some(flag) = flags.next_flag().map_err(usage)? {
        let number = |flags: &mut Flags, name: &str| -> Result<f64, (i32, String)> {
            let v = flags.value(name).map_err(usage)?;
            v.parse::<f64>().map_err(|_| {
                usage(format!(
                    "option --{name}: expected a proper numerical parameter"
                ))
            })
        };
        match flag.as_str() {
            "f" | "fail" => a.fail = true,
            "s" | "silent" => a.silent = true,
            "S" | "show-error" => a.show_error = true,
            "L" | "location" => a.location = true,
            "o" | "output" => match flags.value(&flag).map_err(usage)?.as_str() {
                "-" => a.discard = false,
                "/dev/null" => a.discard = true,
                other => {
                    return Err((
                        23,
                        format!(
                            "curl: (23) Failure writing output to destination: {other} is read-only in this rescue image\n"
                        ),
                    ));
                }
            },
            "retry" => a.retries = number(&mut flags, "retry")? as u32,
            "retry-delay" => a.retry_delay = Some(number(&mut flags, "retry-delay")? as u64),
            "retry-connrefused" => a.retry_connrefused = true,
            "connect-timeout" => a.connect_timeout = Some(number(&mut flags, "connect-timeout")?),
            "m" | "max-time" => a.max_time = Some(number(&mut flags, "max-time")?),
            other => {
                let shown = if other.len() == 1 {
                    format!("-{other}")
                } else {
                    format!("--{other}")
                };
                return Err(usage(format!("option {shown}: is unknown")));
            }
        }
    }
    let mut urls = flags.operands();
    match urls.len() {
        0 => Err(usage("no URL specified".into())),
        1 => {
            a.url = urls.remove(0);
            Ok(a)
        }
        _ => Err(usage(
            "only one URL per call is supported by this rescue image".into(),
        )),
    }
}

/// The `corrupt_download` fault: one byte of the body flipped half way
/// through (or 64 KiB in when the length is unknown), which xz and zstd
/// detect and a raw image carries to the disk.
struct Corruptor {
    at: Option<u64>,
}

impl Corruptor {
    /// Flips the byte at `self.at` if it falls in `chunk`, which starts at
    /// body offset `start`; the fault is consumed then.
    fn apply(&mut self, hooks: &FaultHooks, start: u64, chunk: Bytes) -> Bytes {
        let Some(at) = self.at else {
            return chunk;
        };
        if !(start..start + chunk.len() as u64).contains(&at) {
            return chunk;
        }
        self.at = None;
        if !hooks.take(FaultKind::CorruptDownload) {
            return chunk;
        }
        let mut bytes = chunk.to_vec();
        bytes[(at - start) as usize] ^= 0xff;
        Bytes::from(bytes)
    }
}

async fn transfer(
    args: &Args,
    io: &Stdio,
    written: &mut u64,
    hooks: &FaultHooks,
    corrupt: &mut Option<Corruptor>,
) -> Result<(), Failure> {
    let url = reqwest::Url::parse(&args.url)
        .map_err(|_| Failure::new(3, "URL rejected: Malformed input to a URL function"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(Failure::new(
            1,
            format!("Protocol \"{}\" not supported", url.scheme()),
        ));
    }
    crate::install_crypto_provider();
    let host = url.host_str().unwrap_or_default().to_string();
    let port = url.port_or_known_default().unwrap_or(80);
    let mut builder = reqwest::Client::builder()
        .no_proxy()
        .user_agent(USER_AGENT)
        .redirect(if args.location {
            reqwest::redirect::Policy::limited(50)
        } else {
            reqwest::redirect::Policy::none()
        });
    if let Some(secs) = args.connect_timeout {
        builder = builder.connect_timeout(Duration::from_secs_f64(secs));
    }
    if let Some(secs) = args.max_time {
        builder = builder.timeout(Duration::from_secs_f64(secs));
    }
    let client = builder
        .build()
        .map_err(|e| Failure::new(2, format!("failed to initialise: {e}")))?;
    let started = Instant::now();
    let response = client
        .get(url)
        .header("Accept", "*/*")
        .send()
        .await
        .map_err(|e| classify(&e, &host, port, started, 0))?;
    let status = response.status();
    if args.fail && status.as_u16() >= 400 {
        let failure = Failure::new(
            22,
            format!("The requested URL returned error: {}", status.as_u16()),
        );
        let transient = matches!(status.as_u16(), 408 | 429 | 500 | 502 | 503 | 504);
        return Err(if transient {
            failure.transient()
        } else {
            failure
        });
    }
    let expected = response.content_length();
    if let Some(c) = corrupt {
        c.at = Some(expected.map_or(64 << 10, |len| len / 2));
    }
    let mut body = response.bytes_stream();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| match expected {
            Some(len) if e.is_body() || e.is_decode() => Failure::new(
                18,
                format!(
                    "transfer closed with {} bytes remaining to read",
                    len.saturating_sub(*written)
                ),
            ),
            _ => classify(&e, &host, port, started, *written),
        })?;
        let start = *written;
        *written += chunk.len() as u64;
        let chunk = match corrupt {
            Some(c) => c.apply(hooks, start, chunk),
            None => chunk,
        };
        if !args.discard && io.stdout.write(chunk).await.is_err() {
            return Err(Failure::new(23, "Failure writing output to destination"));
        }
    }
    Ok(())
}

fn classify(e: &reqwest::Error, host: &str, port: u16, started: Instant, received: u64) -> Failure {
    let ms = started.elapsed().as_millis();
    if e.is_timeout() {
        return if e.is_connect() {
            Failure::new(28, format!("Connection timed out after {ms} milliseconds"))
        } else {
            Failure::new(
                28,
                format!(
                    "Operation timed out after {ms} milliseconds with {received} bytes received"
                ),
            )
        }
        .transient();
    }
    if e.is_redirect() {
        return Failure::new(47, "Maximum (50) redirects followed");
    }
    if e.is_connect() {
        let mut source = e.source();
        while let Some(s) = source {
            if s.to_string().contains("dns error") {
                return Failure::new(6, format!("Could not resolve host: {host}"));
            }
            source = s.source();
        }
        return Failure::new(
            7,
            format!(
                "Failed to connect to {host} port {port} after {ms} ms: Couldn't connect to server"
            ),
        );
    }
    Failure::new(56, "Recv failure: Connection reset by peer")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &[&str]) -> Result<Args, (i32, String)> {
        parse_args(&line.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn usual_flags_parse() {
        let a = parse(&["-fsSL", "--retry", "3", "http://h/x.raw.xz"]).unwrap();
        assert!(a.fail && a.silent && a.show_error && a.location);
        assert_eq!(a.retries, 3);
        assert_eq!(a.url, "http://h/x.raw.xz");
    }

    #[test]
    fn unknown_options_and_missing_url() {
        let (code, msg) = parse(&["-fsSLk", "http://h/"]).unwrap_err();
        assert_eq!(code, 2);
        assert_eq!(
            msg,
            "curl: option -k: is unknown\ncurl: try 'curl --help' for more information\n"
        );
        let (code, msg) = parse(&["--insecure", "http://h/"]).unwrap_err();
        assert_eq!(
            (code, msg.lines().next().unwrap()),
            (2, "curl: option --insecure: is unknown")
        );
        let (code, msg) = parse(&["-fsSL"]).unwrap_err();
        assert_eq!(
            (code, msg.lines().next().unwrap()),
            (2, "curl: no URL specified")
        );
    }
}
