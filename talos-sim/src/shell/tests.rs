//! Behaviour of the shell as a whole: lists, pipelines, options and the
//! small commands.

use sha2::{Digest, Sha256};

use super::test_support::{env_with, run, run_input, run_ok};
use crate::image::hex;

#[tokio::test]
async fn unknown_commands_are_not_found() {
    let env = env_with("NVMe", 1 << 20);
    let (status, out, err) = run(&env, "wget http://x").await;
    assert_eq!(
        (status, out.as_str(), err.as_str()),
        (127, "", "sh: wget: command not found\n")
    );
    let (status, _, err) = run(&env, "sudo wget http://x").await;
    assert_eq!(
        (status, err.as_str()),
        (1, "sudo: wget: command not found\n")
    );
}

#[tokio::test]
async fn lists_follow_exit_statuses() {
    let env = env_with("NVMe", 1 << 20);
    assert_eq!(run_ok(&env, "true && echo yes || echo no").await, "yes\n");
    let (status, out, _) = run(&env, "false && echo yes || echo no").await;
    assert_eq!((status, out.as_str()), (0, "no\n"));
    let (status, out, _) = run(&env, "false; echo after").await;
    assert_eq!((status, out.as_str()), (0, "after\n"));
    let (status, out, _) = run(&env, "set -e; false; echo after").await;
    assert_eq!((status, out.as_str()), (1, ""));
    let (status, out, _) = run(&env, "set -e; false || echo handled").await;
    assert_eq!((status, out.as_str()), (0, "handled\n"));
}

#[tokio::test]
async fn pipeline_status_and_pipefail() {
    let env = env_with("NVMe", 1 << 20);
    let (status, _, _) = run(&env, "false | true").await;
    assert_eq!(status, 0);
    let (status, _, _) = run(&env, "set -o pipefail; false | true").await;
    assert_eq!(status, 1);
    let (status, _, _) = run(&env, "set -euo pipefail; false | true; echo unreachable").await;
    assert_eq!(status, 1);
    let (status, _, _) = run(&env, "bash -o pipefail -c 'false | true'").await;
    assert_eq!(status, 1);
    let (status, _, _) = run(&env, "sh -c 'false | true'").await;
    assert_eq!(status, 0);
    let (status, _, err) = run(&env, "set -o bogus").await;
    assert_eq!(
        (status, err.as_str()),
        (2, "sh: set: bogus: invalid option name\n")
    );
}

#[tokio::test]
async fn syntax_errors_exit_2() {
    let env = env_with("NVMe", 1 << 20);
    let (status, _, err) = run(&env, "echo a |").await;
    assert_eq!(
        (status, err.as_str()),
        (2, "sh: syntax error: unexpected end of file\n")
    );
    let (status, _, err) = run(&env, "echo $HOME").await;
    assert_eq!(
        (status, err.as_str()),
        (
            2,
            "sh: parameter expansion is not supported by this rescue shell\n"
        )
    );
}

#[tokio::test]
async fn redirections_route_streams() {
    let env = env_with("NVMe", 1 << 20);
    let (status, out, err) = run(&env, "wget 2>&1").await;
    assert_eq!(
        (status, out.as_str(), err.as_str()),
        (127, "sh: wget: command not found\n", "")
    );
    let (_, out, err) = run(&env, "echo oops >&2").await;
    assert_eq!((out.as_str(), err.as_str()), ("", "oops\n"));
    let (_, out, err) = run(&env, "wget 2>/dev/null; echo x >/dev/null").await;
    assert_eq!((out.as_str(), err.as_str()), ("", ""));
}

#[tokio::test]
async fn echo_uname_and_blockdev() {
    let env = env_with("SSD", 1_024_209_543_168);
    assert_eq!(run_ok(&env, "echo -n 'a  b' c").await, "a  b c");
    assert_eq!(run_ok(&env, "uname").await, "Linux\n");
    assert_eq!(run_ok(&env, "uname -m").await, "x86_64\n");
    assert_eq!(
        run_ok(&env, "uname -srm").await,
        "Linux 6.8.0-49-generic x86_64\n"
    );
    assert_eq!(
        run_ok(&env, "sudo blockdev --getsize64 /dev/sda").await,
        "1024209543168\n"
    );
    let (status, _, err) = run(&env, "blockdev --getsize64 /dev/nvme0n1").await;
    assert_eq!(
        (status, err.as_str()),
        (
            1,
            "blockdev: cannot open /dev/nvme0n1: No such file or directory\n"
        )
    );
    let (status, _, err) = run(&env, "uname -z").await;
    assert_eq!(
        (status, err.as_str()),
        (
            1,
            "uname: invalid option -- 'z'\nTry 'uname --help' for more information.\n"
        )
    );
}

#[tokio::test]
async fn sha256sum_of_stdin_and_of_the_disk() {
    let env = env_with("NVMe", 1 << 20);
    let data = b"hello world\n".to_vec();
    let (status, out, _) = run_input(&env, "sha256sum", data.clone()).await;
    assert_eq!(status, 0);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        format!("{}  -\n", hex(&Sha256::digest(&data)))
    );

    // Write known bytes to the disk, then hash a prefix of it back.
    let payload: Vec<u8> = (0..200_000u32).map(|i| (i % 253) as u8).collect();
    let (status, _, err) = run_input(
        &env,
        "dd of=/dev/nvme0n1 bs=4M status=none",
        payload.clone(),
    )
    .await;
    assert_eq!((status, err.as_str()), (0, ""));
    let want = hex(&Sha256::digest(&payload));
    assert_eq!(
        run_ok(&env, "sudo head -c 200000 /dev/nvme0n1 | sha256sum").await,
        format!("{want}  -\n")
    );
    assert_eq!(
        run_ok(
            &env,
            "dd if=/dev/nvme0n1 bs=100000 count=2 status=none | sha256sum"
        )
        .await,
        format!("{want}  -\n")
    );
    let whole = {
        let mut disk = payload.clone();
        disk.resize(1 << 20, 0);
        hex(&Sha256::digest(&disk))
    };
    assert_eq!(
        run_ok(&env, "sha256sum /dev/nvme0n1").await,
        format!("{whole}  /dev/nvme0n1\n")
    );
    let (status, _, err) = run(&env, "sha256sum /etc/passwd").await;
    assert_eq!(
        (status, err.as_str()),
        (1, "sha256sum: /etc/passwd: No such file or directory\n")
    );
}

#[tokio::test]
async fn head_and_cat_stream() {
    let env = env_with("NVMe", 1 << 20);
    let (_, out, _) = run_input(&env, "cat | head -c 5", b"abcdefghij".to_vec()).await;
    assert_eq!(out, b"abcde");
    let (_, out, _) = run_input(&env, "head -n 2", b"1\n2\n3\n".to_vec()).await;
    assert_eq!(out, b"1\n2\n");
    let (_, out, _) = run_input(&env, "head -c 1K /dev/zero | cat", Vec::new()).await;
    assert_eq!(out, vec![0u8; 1024]);
    let (status, _, err) = run(&env, "head -c abc").await;
    assert_eq!(
        (status, err.as_str()),
        (1, "head: invalid number of bytes: 'abc'\n")
    );
}

#[tokio::test]
async fn dd_reports_records_and_bytes() {
    let env = env_with("NVMe", 1 << 20);
    let (status, _, err) = run_input(&env, "dd of=/dev/nvme0n1 bs=4096", vec![7u8; 10_000]).await;
    assert_eq!(status, 0);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines[0], "2+1 records in");
    assert_eq!(lines[1], "2+1 records out");
    assert!(
        lines[2].starts_with("10000 bytes (10 kB, 9.8 KiB) copied, "),
        "{}",
        lines[2]
    );
    assert!(lines[2].ends_with("B/s"));
}

#[tokio::test]
async fn dd_and_tee_write_at_the_disk_write_rate() {
    let env = std::sync::Arc::new(super::ShellEnv {
        disk_write_rate: Some(crate::timings::WriteRate::mb_per_s(10.0)),
        ..(*env_with("NVMe", 8 << 20)).clone()
    });
    let started = std::time::Instant::now();
    let (status, _, err) = run_input(&env, "dd of=/dev/nvme0n1 bs=1M", vec![7u8; 3_000_000]).await;
    assert_eq!(status, 0, "{err}");
    // 3 MB at 10 MB/s: dd's own report shows the rate.
    assert!(started.elapsed() >= std::time::Duration::from_millis(300));
    let report = err.lines().nth(2).unwrap();
    let rate: f64 = report
        .strip_suffix(" MB/s")
        .and_then(|r| r.rsplit(", ").next())
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("{report}"));
    assert!(rate <= 10.0, "{report}");

    let started = std::time::Instant::now();
    let (status, _, err) = run_input(&env, "tee /dev/nvme0n1", vec![1u8; 1_000_000]).await;
    assert_eq!((status, err.as_str()), (0, ""));
    assert!(started.elapsed() >= std::time::Duration::from_millis(100));
}

#[tokio::test]
async fn dd_stops_at_the_end_of_the_disk() {
    let env = env_with("SSD", 8192);
    let (status, _, err) = run_input(&env, "dd of=/dev/sda bs=4096", vec![1u8; 12_288]).await;
    assert_eq!(status, 1);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(
        lines[0],
        "dd: error writing '/dev/sda': No space left on device"
    );
    assert_eq!(lines[1], "3+0 records in");
    assert_eq!(lines[2], "2+0 records out");
    assert!(lines[3].starts_with("8192 bytes (8.2 kB, 8.0 KiB) copied"));
    let (status, _, err) = run(&env, "dd of=/dev/nvme0n1").await;
    assert_eq!(
        (status, err.as_str()),
        (
            1,
            "dd: failed to open '/dev/nvme0n1': No such file or directory\n"
        )
    );
}

#[tokio::test]
async fn writers_into_a_closed_pipe_get_sigpipe() {
    let env = env_with("NVMe", 1 << 20);
    // `head` exits after 3 bytes; `cat /dev/zero` must then die of SIGPIPE.
    let (status, out, _) = run(&env, "set -o pipefail; cat /dev/zero | head -c 3").await;
    assert_eq!((status, out.len()), (141, 3));
}

fn payload(len: usize) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_mul(31) % 251) as u8)
        .collect()
}

#[tokio::test]
async fn tee_writes_the_disk_and_passes_stdin_on() {
    let env = env_with("NVMe", 1 << 20);
    let data = payload(300_000);
    let (status, out, err) = run_input(&env, "sudo tee /dev/nvme0n1", data.clone()).await;
    assert_eq!((status, err.as_str()), (0, ""));
    assert_eq!(out, data);
    let back = run_ok(&env, "head -c 300000 /dev/nvme0n1 | sha256sum").await;
    assert_eq!(back, format!("{}  -\n", hex(&Sha256::digest(&data))));
    // `/dev/null` and several files are fine; unknown files are not.
    let (status, out, err) = run_input(&env, "tee /dev/null /tmp/x", b"abc".to_vec()).await;
    assert_eq!(
        (status, out.as_slice(), err.as_str()),
        (1, &b"abc"[..], "tee: /tmp/x: No such file or directory\n")
    );
    let (status, _, err) = run(&env, "tee -a /dev/nvme0n1").await;
    assert_eq!(
        (status, err.as_str()),
        (1, "tee: --append is not supported by this rescue image\n")
    );
}

#[tokio::test]
async fn tee_past_the_end_of_the_disk_keeps_passing_stdin_on() {
    let env = env_with("SSD", 8192);
    let (status, out, err) = run_input(&env, "tee /dev/sda", vec![3u8; 12_000]).await;
    assert_eq!(
        (status, out.len(), err.as_str()),
        (1, 12_000, "tee: /dev/sda: No space left on device\n")
    );
}

#[tokio::test]
async fn dd_without_files_is_a_counting_pass_through() {
    let env = env_with("NVMe", 1 << 20);
    let data = payload(10_000);
    let (status, out, err) = run_input(&env, "dd bs=4096 iflag=fullblock", data.clone()).await;
    assert_eq!(status, 0);
    assert_eq!(out, data);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(&lines[..2], &["2+1 records in", "2+1 records out"]);
    assert!(lines[2].starts_with("10000 bytes (10 kB, 9.8 KiB) copied, "));
}

#[tokio::test]
async fn dd_count_bytes_reads_exactly_that_many_bytes() {
    let env = env_with("NVMe", 1 << 20);
    let data = payload(200_000);
    run_input(&env, "tee /dev/nvme0n1 >/dev/null", data.clone()).await;
    let (status, out, err) = run_input(
        &env,
        "dd if=/dev/nvme0n1 bs=4096 iflag=direct,count_bytes count=5000",
        Vec::new(),
    )
    .await;
    assert_eq!(status, 0);
    assert_eq!(out, data[..5000]);
    assert!(
        err.starts_with("1+1 records in\n1+1 records out\n5000 bytes"),
        "{err}"
    );
    // With a block size larger than the count, and nothing printed.
    let (status, out, err) = run_input(
        &env,
        "dd if=/dev/nvme0n1 bs=4M iflag=direct,count_bytes count=123457 status=none",
        Vec::new(),
    )
    .await;
    assert_eq!((status, out.len(), err.as_str()), (0, 123_457, ""));
    assert_eq!(out, data[..123_457]);
}

/// The contract's write and verify commands (docs/contracts: image write +
/// verification), end to end over the shell.
#[tokio::test]
async fn the_install_write_and_verify_commands_agree_on_the_hash() {
    for (kind, dev) in [("NVMe", "/dev/nvme0n1"), ("SSD", "/dev/sda")] {
        let env = env_with(kind, 32 << 20);
        let data = payload(9 << 20 | 12_345);
        let line =
            format!("set -o pipefail; dd bs=4M iflag=fullblock | sudo tee {dev} | sha256sum");
        let (status, out, err) = run_input(&env, &line, data.clone()).await;
        assert_eq!(status, 0, "{err}");
        let want = format!("{}  -\n", hex(&Sha256::digest(&data)));
        assert_eq!(String::from_utf8(out).unwrap(), want);
        // The controller reads the byte count from dd's last line.
        let last = err.lines().last().unwrap();
        let bytes: u64 = last.split(' ').next().unwrap().parse().unwrap();
        assert_eq!(bytes, data.len() as u64);
        assert!(
            err.starts_with("2+1 records in\n2+1 records out\n"),
            "{err}"
        );
        assert_eq!(run_ok(&env, "sudo sync").await, "");
        let verify = format!(
            "sudo dd if={dev} bs=4M iflag=direct,count_bytes count={bytes} status=none | sha256sum"
        );
        assert_eq!(run_ok(&env, &verify).await, want);
    }
}
