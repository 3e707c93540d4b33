//! Runs a parsed script: lists with `;`/`&&`/`||`, pipelines whose stages run
//! concurrently over bounded pipes, `set -e`/`set -o pipefail`, and the
//! dispatch of a simple command to its implementation.

use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;
use tokio::task::JoinSet;

use super::ShellEnv;
use super::cmd;
use super::io::{Input, Output, Stdio, pipe};
use super::parse::{Connector, Pipeline, Redirect, SimpleCommand, parse};

/// Shell options changed by `set`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Options {
    pub errexit: bool,
    pub pipefail: bool,
}

/// Runs one command line and returns its exit status.
pub async fn run_line(env: Arc<ShellEnv>, line: &str, io: Stdio) -> i32 {
    run_with_options(env, line.to_string(), io, Options::default()).await
}

pub(crate) fn run_with_options(
    env: Arc<ShellEnv>,
    line: String,
    io: Stdio,
    mut opts: Options,
) -> BoxFuture<'static, i32> {
    // Boxed because `sh -c` recurses into here.
    async move {
        let script = match parse(&line) {
            Ok(script) => script,
            Err(e) => {
                io.stderr.say(format!("sh: {e}\n")).await;
                return 2;
            }
        };
        let mut status = 0;
        let count = script.items.len();
        for (i, (connector, pipeline)) in script.items.iter().enumerate() {
            let skip = match connector {
                Connector::Seq => false,
                Connector::And => status != 0,
                Connector::Or => status == 0,
            };
            if skip {
                continue;
            }
            status = run_pipeline(&env, pipeline, &io, &mut opts).await;
            // `set -e` spares commands whose status is tested by `&&`/`||`.
            let tested = script
                .items
                .get(i + 1)
                .is_some_and(|(next, _)| *next != Connector::Seq);
            if opts.errexit && status != 0 && !tested && i + 1 < count {
                break;
            }
        }
        status
    }
    .boxed()
}

async fn run_pipeline(
    env: &Arc<ShellEnv>,
    pipeline: &Pipeline,
    io: &Stdio,
    opts: &mut Options,
) -> i32 {
    // `set` changes this shell only when it is not part of a larger pipeline
    // (pipeline stages run in subshells).
    if let [only] = pipeline.commands.as_slice()
        && only.argv.first().map(String::as_str) == Some("set")
    {
        let stdio = redirected(only, io.stdin.clone(), io.stdout.clone(), io.stderr.clone());
        return set_builtin(&only.argv[1..], opts, &stdio).await;
    }

    let stages = pipeline.commands.len();
    let mut tasks = JoinSet::new();
    let mut stdin = io.stdin.clone();
    for (i, command) in pipeline.commands.iter().enumerate() {
        let (stdout, next_stdin) = if i + 1 < stages {
            pipe()
        } else {
            (io.stdout.clone(), Input::empty())
        };
        let stdio = redirected(command, stdin, stdout, io.stderr.clone());
        let env = env.clone();
        let argv = command.argv.clone();
        tasks.spawn(async move { (i, run_command(env, argv, stdio).await) });
        stdin = next_stdin;
    }
    let mut statuses = vec![0; stages];
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok((i, status)) => statuses[i] = status,
            Err(e) if e.is_panic() => {
                tracing::error!(error = %e, "rescue shell command panicked");
                return 134;
            }
            Err(_) => return 130,
        }
    }
    if opts.pipefail {
        statuses
            .iter()
            .rev()
            .copied()
            .find(|s| *s != 0)
            .unwrap_or(0)
    } else {
        statuses[stages - 1]
    }
}

fn redirected(command: &SimpleCommand, stdin: Input, stdout: Output, stderr: Output) -> Stdio {
    let mut io = Stdio {
        stdin,
        stdout,
        stderr,
    };
    for redirect in &command.redirects {
        match redirect {
            Redirect::StdinFromNull => io.stdin = Input::empty(),
            Redirect::StdoutToNull => io.stdout = Output::null(),
            Redirect::StderrToNull => io.stderr = Output::null(),
            Redirect::StderrToStdout => io.stderr = io.stdout.clone(),
            Redirect::StdoutToStderr => io.stdout = io.stderr.clone(),
        }
    }
    io
}

async fn set_builtin(args: &[String], opts: &mut Options, io: &Stdio) -> i32 {
    let mut new = *opts;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let (enable, flags) = match arg.as_bytes().first() {
            Some(b'-') => (true, &arg[1..]),
            Some(b'+') => (false, &arg[1..]),
            _ => {
                io.stderr
                    .say(format!(
                        "sh: set: {arg}: positional parameters are not supported\n"
                    ))
                    .await;
                return 2;
            }
        };
        for flag in flags.chars() {
            match flag {
                'e' => new.errexit = enable,
                // No variables exist, so `-u` can never trigger.
                'u' => {}
                'o' => match args.next().map(String::as_str) {
                    Some("pipefail") => new.pipefail = enable,
                    Some("errexit") => new.errexit = enable,
                    Some("nounset") => {}
                    Some(other) => {
                        io.stderr
                            .say(format!("sh: set: {other}: invalid option name\n"))
                            .await;
                        return 2;
                    }
                    None => {
                        io.stderr.say("sh: set: -o: option name required\n").await;
                        return 2;
                    }
                },
                other => {
                    io.stderr
                        .say(format!("sh: set: -{other}: invalid option\n"))
                        .await;
                    return 2;
                }
            }
        }
    }
    *opts = new;
    0
}

/// Runs one simple command with its arguments.
pub(crate) fn run_command(
    env: Arc<ShellEnv>,
    argv: Vec<String>,
    io: Stdio,
) -> BoxFuture<'static, i32> {
    async move {
        let Some(program) = argv.first() else {
            return 0;
        };
        let name = program
            .strip_prefix("/usr/bin/")
            .or_else(|| program.strip_prefix("/usr/sbin/"))
            .or_else(|| program.strip_prefix("/bin/"))
            .or_else(|| program.strip_prefix("/sbin/"))
            .unwrap_or(program)
            .to_string();
        let args = &argv[1..];
        match name.as_str() {
            "sudo" => sudo(env, args, io).await,
            "sh" | "bash" => nested_shell(env, &name, args, io).await,
            "true" => 0,
            "false" => 1,
            "lsblk" => cmd::lsblk::run(&env, args, &io).await,
            "ip" => cmd::ip::run(&env, args, &io).await,
            "curl" => cmd::curl::run(&env, args, &io).await,
            "xz" | "unxz" | "xzcat" => cmd::codec::xz(&name, args, io).await,
            "zstd" | "unzstd" | "zstdcat" => cmd::codec::zstd(&name, args, io).await,
            "dd" => cmd::dd::run(&env, args, io).await,
            "tee" => cmd::tee::run(&env, args, io).await,
            "sha256sum" => cmd::text::sha256sum(&env, args, io).await,
            "head" => cmd::text::head(&env, args, io).await,
            "cat" => cmd::text::cat(&env, args, io).await,
            "echo" => cmd::text::echo(args, &io).await,
            "uname" => cmd::text::uname(&env, args, &io).await,
            "sync" => cmd::text::sync(&env, &io).await,
            "blockdev" => cmd::text::blockdev(&env, args, &io).await,
            _ => {
                io.stderr
                    .say(format!("sh: {name}: command not found\n"))
                    .await;
                127
            }
        }
    }
    .boxed()
}

/// The rescue user may run anything as root without a password.
async fn sudo(env: Arc<ShellEnv>, args: &[String], io: Stdio) -> i32 {
    let mut rest = args;
    while let Some(first) = rest.first() {
        match first.as_str() {
            "-n" | "-E" | "-H" | "--non-interactive" | "--preserve-env" => rest = &rest[1..],
            "--" => {
                rest = &rest[1..];
                break;
            }
            f if f.starts_with('-') => {
                io.stderr
                    .say(format!(
                        "sudo: invalid option -- '{}'\n",
                        f.trim_start_matches('-')
                    ))
                    .await;
                return 1;
            }
            _ => break,
        }
    }
    if rest.is_empty() {
        io.stderr.say("usage: sudo command\n").await;
        return 1;
    }
    let known = super::cmd::KNOWN.contains(&rest[0].rsplit('/').next().unwrap_or(""));
    if !known {
        io.stderr
            .say(format!("sudo: {}: command not found\n", rest[0]))
            .await;
        return 1;
    }
    run_command(env, rest.to_vec(), io).await
}

/// `sh -c 'LINE'` and `bash [-e] [-o pipefail] -c 'LINE'`.
async fn nested_shell(env: Arc<ShellEnv>, name: &str, args: &[String], io: Stdio) -> i32 {
    let mut opts = Options::default();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "-c" => {
                let Some(line) = args.next() else {
                    io.stderr
                        .say(format!("{name}: -c: option requires an argument\n"))
                        .await;
                    return 2;
                };
                return run_with_options(env, line.clone(), io, opts).await;
            }
            "-e" => opts.errexit = true,
            "-o" | "-eo" if name == "bash" => {
                if arg == "-eo" {
                    opts.errexit = true;
                }
                match args.next().map(String::as_str) {
                    Some("pipefail") => opts.pipefail = true,
                    Some("errexit") => opts.errexit = true,
                    other => {
                        let other = other.unwrap_or("");
                        io.stderr
                            .say(format!("{name}: {other}: invalid option name\n"))
                            .await;
                        return 2;
                    }
                }
            }
            _ => {
                io.stderr
                    .say(format!(
                        "{name}: only `{name} -c COMMAND` is supported by this rescue shell\n"
                    ))
                    .await;
                return 2;
            }
        }
    }
    io.stderr
        .say(format!(
            "{name}: interactive shells are not supported by this rescue shell\n"
        ))
        .await;
    2
}
