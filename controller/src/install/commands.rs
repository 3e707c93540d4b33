//! Command lines run in the rescue system, and parsers of their output.
//!
//! Only standard tools of a Linux rescue image are used (`lsblk`, `ip`, `curl`,
//! `xz`/`zstd`, `dd`, `sync`, `sudo`); the rescue user may not be root, in which
//! case the commands that write the disk go through `sudo`.

/// Lists whole block devices (no partitions) with their type.
pub const LIST_DISKS: &str = "lsblk -dno NAME,TYPE";

/// Lists network links, one per line.
pub const LIST_LINKS: &str = "ip -o link";

/// How the image at a URL is compressed, judged from its file name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    Xz,
    Zstd,
    None,
}

impl Compression {
    /// `.raw.xz`, `.raw.zst` or `.raw`; anything else is refused rather than
    /// written to the disk undecoded.
    pub fn from_url(url: &str) -> Result<Self, String> {
        let path = url.split(['?', '#']).next().unwrap_or(url);
        if path.ends_with(".xz") {
            Ok(Compression::Xz)
        } else if path.ends_with(".zst") {
            Ok(Compression::Zstd)
        } else if path.ends_with(".raw") {
            Ok(Compression::None)
        } else {
            Err(format!(
                "image URL {url} does not end in .raw.xz, .raw.zst or .raw"
            ))
        }
    }
}

/// Quotes a word for a POSIX shell.
fn shell_quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

fn sudo(as_root: bool) -> &'static str {
    if as_root { "" } else { "sudo " }
}

/// Streams the image onto the disk and hashes what went by, in one pass.
///
/// `dd` without `if=`/`of=` only counts: it passes the decompressed stream
/// through in full blocks and prints the byte count on stderr when it ends.
/// `tee` writes the stream to the disk and on to `sha256sum`, whose hash is
/// what was written (or should have been). `pipefail` makes a failed
/// download or a corrupt archive fail the whole line.
pub fn write_image(url: &str, compression: Compression, disk: &str, as_root: bool) -> String {
    let decompress = match compression {
        Compression::Xz => " | xz -d",
        Compression::Zstd => " | zstd -d",
        Compression::None => "",
    };
    format!(
        "set -o pipefail; curl -fsSL {url}{decompress} | dd bs=4M iflag=fullblock | {sudo}tee /dev/{disk} | sha256sum",
        url = shell_quote(url),
        sudo = sudo(as_root),
    )
}

/// Reads back exactly the `bytes` just written, bypassing the page cache, and
/// hashes them: what the disk really holds.
pub fn verify_image(disk: &str, bytes: u64, as_root: bool) -> String {
    format!(
        "{sudo}dd if=/dev/{disk} bs=4M iflag=direct,count_bytes count={bytes} status=none | sha256sum",
        sudo = sudo(as_root),
    )
}

/// What the image write reported: the bytes that went through `dd` and the
/// sha256 of the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    pub bytes: u64,
    pub sha256: String,
}

/// Parses the output of [`write_image`]: the hash from `sha256sum` on stdout,
/// the byte count from the last GNU `dd` status line on stderr
/// (`B bytes (… MB, … MiB) copied, T s, R MB/s`).
pub fn parse_written(stdout: &str, stderr: &str) -> Result<Written, String> {
    let sha256 = parse_sha256sum(stdout)?;
    let bytes = stderr
        .lines()
        .rev()
        .find_map(|line| {
            let mut words = line.split_whitespace();
            let count = words.next()?;
            (words.next() == Some("bytes") && count.bytes().all(|b| b.is_ascii_digit()))
                .then(|| count.parse::<u64>().ok())
                .flatten()
        })
        .ok_or_else(|| "no byte count in the output of dd".to_string())?;
    Ok(Written { bytes, sha256 })
}

/// Parses `sha256sum` reading stdin: `<64 hex>  -`; returns the lowercase hash.
pub fn parse_sha256sum(stdout: &str) -> Result<String, String> {
    let hash = stdout
        .lines()
        .rev()
        .find_map(|line| line.split_whitespace().next())
        .unwrap_or_default();
    if hash.len() == 64 && hash.chars().all(|c| c.is_ascii_hexdigit()) {
        Ok(hash.to_ascii_lowercase())
    } else {
        Err("no sha256 in the output of sha256sum".to_string())
    }
}

/// The URL without its query string or fragment, for Events and logs: a
/// mirror's URL may carry a signature there.
pub fn display_url(url: &str) -> &str {
    url.split(['?', '#']).next().unwrap_or(url)
}

/// Flushes everything to the disk before the reboot.
pub fn sync(as_root: bool) -> String {
    format!("{}sync", sudo(as_root))
}

/// Picks the install disk from `lsblk -dno NAME,TYPE` output: the selector if
/// given (and present as a disk), else the first device of type `disk`.
pub fn pick_disk(lsblk: &str, selector: Option<&str>) -> Result<String, String> {
    let disks: Vec<&str> = lsblk
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            match (fields.next(), fields.next()) {
                (Some(name), Some("disk")) => Some(name),
                _ => None,
            }
        })
        .collect();
    match selector.map(|s| s.trim_start_matches("/dev/")) {
        Some(wanted) if disks.contains(&wanted) => Ok(wanted.to_string()),
        Some(wanted) => Err(format!(
            "install disk {wanted} not found (disks: {})",
            list_or_none(&disks)
        )),
        None => disks
            .first()
            .map(|d| d.to_string())
            .ok_or_else(|| "no disk found by lsblk".to_string()),
    }
}

fn list_or_none(items: &[&str]) -> String {
    if items.is_empty() {
        "none".to_string()
    } else {
        items.join(", ")
    }
}

/// Picks the primary NIC's MAC from `ip -o link` output: the first Ethernet
/// link with carrier (`LOWER_UP`), else the first Ethernet link at all.
/// Loopback and non-Ethernet links are skipped.
pub fn pick_mac(ip_link: &str) -> Result<String, String> {
    let links: Vec<(bool, String)> = ip_link
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            words.find(|w| *w == "link/ether")?;
            let mac = words.next()?.to_ascii_lowercase();
            let carrier = line
                .split_once('<')
                .and_then(|(_, rest)| rest.split_once('>'))
                .is_some_and(|(flags, _)| flags.split(',').any(|f| f == "LOWER_UP"));
            is_mac(&mac).then_some((carrier, mac))
        })
        .collect();
    links
        .iter()
        .find(|(carrier, _)| *carrier)
        .or_else(|| links.first())
        .map(|(_, mac)| mac.clone())
        .ok_or_else(|| "no Ethernet link found by ip -o link".to_string())
}

fn is_mac(s: &str) -> bool {
    let parts: Vec<&str> = s.split(':').collect();
    parts.len() == 6
        && parts
            .iter()
            .all(|p| p.len() == 2 && p.chars().all(|c| c.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compression_follows_the_file_name() {
        let base = "https://factory.talos.dev/image/376567988ad3/v1.13.9/metal-amd64";
        assert_eq!(
            Compression::from_url(&format!("{base}.raw.xz")),
            Ok(Compression::Xz)
        );
        assert_eq!(
            Compression::from_url(&format!("{base}.raw.zst")),
            Ok(Compression::Zstd)
        );
        assert_eq!(
            Compression::from_url(&format!("{base}.raw")),
            Ok(Compression::None)
        );
        assert_eq!(
            Compression::from_url(&format!("{base}.raw.zst?X-Amz-Signature=abc")),
            Ok(Compression::Zstd)
        );
        assert!(Compression::from_url(&format!("{base}.iso")).is_err());
    }

    #[test]
    fn write_image_streams_through_a_counting_dd_into_tee_and_sha256sum() {
        assert_eq!(
            write_image(
                "https://img.example/metal-amd64.raw.xz",
                Compression::Xz,
                "nvme0n1",
                true
            ),
            "set -o pipefail; curl -fsSL 'https://img.example/metal-amd64.raw.xz' | xz -d | dd bs=4M iflag=fullblock | tee /dev/nvme0n1 | sha256sum"
        );
        assert_eq!(
            write_image(
                "https://img.example/a.raw.zst",
                Compression::Zstd,
                "sda",
                false
            ),
            "set -o pipefail; curl -fsSL 'https://img.example/a.raw.zst' | zstd -d | dd bs=4M iflag=fullblock | sudo tee /dev/sda | sha256sum"
        );
        assert_eq!(
            write_image("https://img.example/a.raw", Compression::None, "sda", true),
            "set -o pipefail; curl -fsSL 'https://img.example/a.raw' | dd bs=4M iflag=fullblock | tee /dev/sda | sha256sum"
        );
    }

    #[test]
    fn verify_reads_back_exactly_the_bytes_written() {
        assert_eq!(
            verify_image("nvme0n1", 1_306_525_696, false),
            "sudo dd if=/dev/nvme0n1 bs=4M iflag=direct,count_bytes count=1306525696 status=none | sha256sum"
        );
        assert_eq!(
            verify_image("sda", 4096, true),
            "dd if=/dev/sda bs=4M iflag=direct,count_bytes count=4096 status=none | sha256sum"
        );
    }

    const HASH: &str = "3f0a1e2b9c8d7f6e5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f";

    #[test]
    fn written_bytes_and_hash_are_parsed_from_dd_and_sha256sum() {
        let stderr = "311+1 records in\n311+1 records out\n1306525696 bytes (1.3 GB, 1.2 GiB) copied, 6.52 s, 200 MB/s\n";
        assert_eq!(
            parse_written(&format!("{HASH}  -\n"), stderr),
            Ok(Written {
                bytes: 1_306_525_696,
                sha256: HASH.to_string()
            })
        );
        // Noise before the status lines (curl, xz warnings) is skipped; the
        // last byte count wins.
        let noisy = format!("xz: warning\n12 bytes (12 B) copied, 0 s, 1 kB/s\n{stderr}");
        assert_eq!(
            parse_written(&format!("{}  -\n", HASH.to_uppercase()), &noisy)
                .map(|w| (w.bytes, w.sha256)),
            Ok((1_306_525_696, HASH.to_string()))
        );
        assert_eq!(
            parse_written(&format!("{HASH}  -\n"), "311+1 records in\n"),
            Err("no byte count in the output of dd".to_string())
        );
        assert_eq!(
            parse_written("", stderr),
            Err("no sha256 in the output of sha256sum".to_string())
        );
        assert!(parse_sha256sum("abc  -\n").is_err());
        assert!(parse_sha256sum(&format!("{}  -\n", &HASH[..63])).is_err());
    }

    #[test]
    fn displayed_urls_lose_their_query_string() {
        assert_eq!(
            display_url("https://s3.example/metal.raw.xz?X-Amz-Signature=abc"),
            "https://s3.example/metal.raw.xz"
        );
        assert_eq!(display_url("https://x/a.raw.zst"), "https://x/a.raw.zst");
    }

    #[test]
    fn sync_uses_sudo_unless_root() {
        assert_eq!(sync(true), "sync");
        assert_eq!(sync(false), "sudo sync");
    }

    const LSBLK: &str = "loop0 loop\nsr0   rom\nnvme0n1 disk\nnvme1n1 disk\n";

    #[test]
    fn first_disk_skips_loop_and_rom_devices() {
        assert_eq!(pick_disk(LSBLK, None), Ok("nvme0n1".to_string()));
        assert_eq!(
            pick_disk("sda disk\nsdb disk\n", None),
            Ok("sda".to_string())
        );
    }

    #[test]
    fn selector_must_name_a_present_disk() {
        assert_eq!(pick_disk(LSBLK, Some("nvme1n1")), Ok("nvme1n1".to_string()));
        assert_eq!(
            pick_disk(LSBLK, Some("/dev/nvme1n1")),
            Ok("nvme1n1".to_string())
        );
        assert_eq!(
            pick_disk(LSBLK, Some("sda")),
            Err("install disk sda not found (disks: nvme0n1, nvme1n1)".to_string())
        );
        assert!(pick_disk(LSBLK, Some("loop0")).is_err());
        assert_eq!(
            pick_disk("loop0 loop\n", None),
            Err("no disk found by lsblk".to_string())
        );
    }

    #[test]
    fn mac_of_the_first_ethernet_link_with_carrier() {
        let out = "1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue state UNKNOWN mode DEFAULT group default qlen 1000\\    link/loopback 00:00:00:00:00:00 brd 00:00:00:00:00:00\n\
                   2: eno1: <NO-CARRIER,BROADCAST,MULTICAST,UP> mtu 1500 qdisc mq state DOWN mode DEFAULT group default qlen 1000\\    link/ether A0:36:9F:00:00:01 brd ff:ff:ff:ff:ff:ff\n\
                   3: eno2: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc mq state UP mode DEFAULT group default qlen 1000\\    link/ether a0:36:9f:00:00:02 brd ff:ff:ff:ff:ff:ff altname enp1s0f1\n";
        assert_eq!(pick_mac(out), Ok("a0:36:9f:00:00:02".to_string()));
    }

    #[test]
    fn mac_falls_back_to_the_first_ethernet_link() {
        let out = "1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536\\    link/loopback 00:00:00:00:00:00 brd 00:00:00:00:00:00\n\
                   2: eth0: <BROADCAST,MULTICAST> mtu 1500\\    link/ether 52:54:00:12:34:56 brd ff:ff:ff:ff:ff:ff\n";
        assert_eq!(pick_mac(out), Ok("52:54:00:12:34:56".to_string()));
        assert!(pick_mac("1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536\\    link/loopback 00:00:00:00:00:00 brd 00:00:00:00:00:00\n").is_err());
        assert!(
            pick_mac("2: eth0: <UP> mtu 1500\\    link/ether zz:54:00:12:34:56 brd\n").is_err()
        );
    }
}
