//! The test image format (`docs/simulator-contracts.md`): a 4096-byte ASCII
//! header followed by a seeded pseudo-random payload whose SHA-256 the header
//! records. `make-image` writes one; a normal boot verifies one on the disk.

use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::path::Path;

use sha2::{Digest, Sha256};

pub const HEADER_LEN: usize = 4096;
const MAGIC: &str = "TALOS-SIM-IMAGE v1";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageHeader {
    pub version: String,
    pub arch: String,
    pub payload_length: u64,
    pub payload_sha256: String,
}

/// Why a disk does not boot; the message is what talos-sim records.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BootError {
    #[error("no bootable device: the disk is blank")]
    Blank,
    #[error("no bootable device: no image header ({0})")]
    BadHeader(String),
    #[error(
        "no bootable device: payload ends at byte {end}, past the end of the {disk_size}-byte disk"
    )]
    Truncated { end: u64, disk_size: u64 },
    #[error("no bootable device: payload sha256 {actual} does not match the header's {expected}")]
    HashMismatch { expected: String, actual: String },
    #[error("no bootable device: cannot read the disk: {0}")]
    Io(String),
}

impl ImageHeader {
    pub fn render(&self) -> [u8; HEADER_LEN] {
        let text = format!(
            "{MAGIC}\nversion: {}\narch: {}\npayload-length: {}\npayload-sha256: {}\n",
            self.version, self.arch, self.payload_length, self.payload_sha256
        );
        let mut block = [0u8; HEADER_LEN];
        block[..text.len()].copy_from_slice(text.as_bytes());
        block
    }

    pub fn parse(block: &[u8]) -> Result<Self, BootError> {
        if block.iter().all(|b| *b == 0) {
            return Err(BootError::Blank);
        }
        let end = block.iter().position(|b| *b == 0).unwrap_or(block.len());
        let text = std::str::from_utf8(&block[..end])
            .map_err(|_| BootError::BadHeader("header is not ASCII".into()))?;
        let mut lines = text.lines();
        if lines.next() != Some(MAGIC) {
            return Err(BootError::BadHeader(format!("first line is not {MAGIC:?}")));
        }
        let (mut version, mut arch, mut length, mut sha) = (None, None, None, None);
        for line in lines {
            let Some((key, value)) = line.split_once(": ") else {
                return Err(BootError::BadHeader(format!("malformed line {line:?}")));
            };
            match key {
                "version" => version = Some(value.to_string()),
                "arch" => arch = Some(value.to_string()),
                "payload-length" => {
                    length = Some(value.parse::<u64>().map_err(|_| {
                        BootError::BadHeader(format!("bad payload-length {value:?}"))
                    })?)
                }
                "payload-sha256" => sha = Some(value.to_ascii_lowercase()),
                _ => {}
            }
        }
        let missing = |k: &str| BootError::BadHeader(format!("missing {k}"));
        Ok(Self {
            version: version.ok_or_else(|| missing("version"))?,
            arch: arch.ok_or_else(|| missing("arch"))?,
            payload_length: length.ok_or_else(|| missing("payload-length"))?,
            payload_sha256: sha.ok_or_else(|| missing("payload-sha256"))?,
        })
    }
}

/// Checks that `disk` holds a bootable image: a parsable header and a payload
/// with the recorded hash, entirely within the disk.
pub fn verify(mut disk: impl Read, disk_size: u64) -> Result<ImageHeader, BootError> {
    let io = |e: io::Error| BootError::Io(e.to_string());
    let mut block = vec![0u8; HEADER_LEN];
    read_full(&mut disk, &mut block).map_err(io)?;
    let header = ImageHeader::parse(&block)?;
    let end = HEADER_LEN as u64 + header.payload_length;
    if end > disk_size {
        return Err(BootError::Truncated { end, disk_size });
    }
    let mut hasher = Sha256::new();
    let copied = io::copy(
        &mut disk.take(header.payload_length),
        &mut HashWriter(&mut hasher),
    )
    .map_err(io)?;
    if copied != header.payload_length {
        return Err(BootError::Truncated { end, disk_size });
    }
    let actual = hex(&hasher.finalize());
    if actual != header.payload_sha256 {
        return Err(BootError::HashMismatch {
            expected: header.payload_sha256,
            actual,
        });
    }
    Ok(header)
}

fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<()> {
    let mut filled = 0;
    while filled < buf.len() {
        match r.read(&mut buf[filled..])? {
            0 => break, // a short disk leaves the rest as zeros, like unwritten sectors
            n => filled += n,
        }
    }
    Ok(())
}

struct HashWriter<'a>(&'a mut Sha256);

impl Write for HashWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

pub fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// Deterministic payload generator (splitmix64 seeded from the image's
/// identity), so the same arguments always give the same image.
struct Payload {
    state: u64,
}

impl Payload {
    fn new(version: &str, arch: &str, length: u64) -> Self {
        let seed = Sha256::digest(format!("{version}/{arch}/{length}"));
        let mut s = [0u8; 8];
        s.copy_from_slice(&seed[..8]);
        Self {
            state: u64::from_le_bytes(s),
        }
    }

    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let word = self.next().to_le_bytes();
            chunk.copy_from_slice(&word[..chunk.len()]);
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    Xz,
    Zstd,
}

impl Compression {
    pub fn from_path(path: &Path) -> Self {
        let name = path.to_string_lossy();
        if name.ends_with(".xz") {
            Self::Xz
        } else if name.ends_with(".zst") {
            Self::Zstd
        } else {
            Self::None
        }
    }
}

/// Writes an image of `size` bytes (header included) into `out`, compressed
/// as asked. Returns the header.
pub fn write_image(
    version: &str,
    arch: &str,
    size: u64,
    compression: Compression,
    out: impl Write,
) -> io::Result<ImageHeader> {
    if size <= HEADER_LEN as u64 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("image size must exceed the {HEADER_LEN}-byte header"),
        ));
    }
    let payload_length = size - HEADER_LEN as u64;
    // First pass hashes the payload for the header, second pass writes it:
    // regenerating is cheaper than holding a large payload in memory.
    let mut hasher = Sha256::new();
    for_each_payload_chunk(version, arch, payload_length, |c| {
        hasher.update(c);
        Ok(())
    })?;
    let header = ImageHeader {
        version: version.to_string(),
        arch: arch.to_string(),
        payload_length,
        payload_sha256: hex(&hasher.finalize()),
    };
    match compression {
        Compression::None => emit(&header, out)?,
        Compression::Xz => {
            // Preset 1: the payload is incompressible, a higher preset only costs time.
            let mut enc = liblzma::write::XzEncoder::new(out, 1);
            emit(&header, &mut enc)?;
            enc.finish()?;
        }
        Compression::Zstd => {
            let mut enc = zstd::stream::write::Encoder::new(out, 3)?;
            emit(&header, &mut enc)?;
            enc.finish()?;
        }
    }
    Ok(header)
}

fn emit(header: &ImageHeader, mut out: impl Write) -> io::Result<()> {
    out.write_all(&header.render())?;
    for_each_payload_chunk(&header.version, &header.arch, header.payload_length, |c| {
        out.write_all(c)
    })?;
    out.flush()
}

fn for_each_payload_chunk(
    version: &str,
    arch: &str,
    length: u64,
    mut f: impl FnMut(&[u8]) -> io::Result<()>,
) -> io::Result<()> {
    let mut rng = Payload::new(version, arch, length);
    let mut buf = vec![0u8; 1 << 16];
    let mut left = length;
    while left > 0 {
        let n = left.min(buf.len() as u64) as usize;
        rng.fill(&mut buf[..n]);
        f(&buf[..n])?;
        left -= n as u64;
    }
    Ok(())
}

/// Parses sizes like `8MiB`, `8M`, `512KiB`, `1GiB`, `4096`.
pub fn parse_size(text: &str) -> Option<u64> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits.parse().ok()?;
    let mult: u64 = match unit {
        "" | "B" => 1,
        "K" | "KiB" => 1 << 10,
        "M" | "MiB" => 1 << 20,
        "G" | "GiB" => 1 << 30,
        "KB" | "kB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        _ => return None,
    };
    n.checked_mul(mult)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw_image(size: u64) -> Vec<u8> {
        let mut out = Vec::new();
        write_image("v1.13.9", "amd64", size, Compression::None, &mut out).unwrap();
        out
    }

    #[test]
    fn header_layout_matches_the_contract() {
        let img = raw_image(8 << 20);
        assert_eq!(img.len(), 8 << 20);
        let text = std::str::from_utf8(&img[..200]).unwrap();
        assert!(text.starts_with(
            "TALOS-SIM-IMAGE v1\nversion: v1.13.9\narch: amd64\npayload-length: 8384512\npayload-sha256: "
        ));
        assert!(img[..HEADER_LEN].ends_with(&[0, 0, 0, 0]));
        let header = ImageHeader::parse(&img[..HEADER_LEN]).unwrap();
        assert_eq!(
            hex(&Sha256::digest(&img[HEADER_LEN..])),
            header.payload_sha256
        );
    }

    #[test]
    fn images_are_deterministic_and_depend_on_arguments() {
        assert_eq!(raw_image(64 << 10), raw_image(64 << 10));
        let mut other = Vec::new();
        write_image("v1.13.8", "amd64", 64 << 10, Compression::None, &mut other).unwrap();
        assert_ne!(raw_image(64 << 10)[HEADER_LEN..], other[HEADER_LEN..]);
    }

    #[test]
    fn verify_accepts_a_written_image_on_a_larger_disk() {
        let mut disk = raw_image(64 << 10);
        disk.resize(1 << 20, 0);
        let header = verify(&disk[..], disk.len() as u64).unwrap();
        assert_eq!(header.version, "v1.13.9");
        assert_eq!(header.arch, "amd64");
    }

    #[test]
    fn verify_rejects_blank_corrupt_and_truncated_disks() {
        assert_eq!(
            verify(&vec![0u8; 1 << 16][..], 1 << 16),
            Err(BootError::Blank)
        );

        let mut corrupt = raw_image(64 << 10);
        corrupt[HEADER_LEN + 100] ^= 0xff;
        assert!(matches!(
            verify(&corrupt[..], corrupt.len() as u64),
            Err(BootError::HashMismatch { .. })
        ));

        let img = raw_image(64 << 10);
        assert!(matches!(
            verify(&img[..32 << 10], 32 << 10),
            Err(BootError::Truncated { .. })
        ));

        let mut garbage = vec![0u8; 8192];
        garbage[..5].copy_from_slice(b"hello");
        assert!(matches!(
            verify(&garbage[..], 8192),
            Err(BootError::BadHeader(_))
        ));
    }

    #[test]
    fn compressed_images_decompress_to_the_raw_image() {
        let raw = raw_image(256 << 10);
        let mut xz = Vec::new();
        write_image("v1.13.9", "amd64", 256 << 10, Compression::Xz, &mut xz).unwrap();
        let mut out = Vec::new();
        liblzma::read::XzDecoder::new(&xz[..])
            .read_to_end(&mut out)
            .unwrap();
        assert_eq!(out, raw);
        let mut zst = Vec::new();
        write_image("v1.13.9", "amd64", 256 << 10, Compression::Zstd, &mut zst).unwrap();
        assert_eq!(zstd::stream::decode_all(&zst[..]).unwrap(), raw);
    }

    #[test]
    fn sizes_parse_with_units() {
        assert_eq!(parse_size("8MiB"), Some(8 << 20));
        assert_eq!(parse_size("8M"), Some(8 << 20));
        assert_eq!(parse_size("512KiB"), Some(512 << 10));
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("2MB"), Some(2_000_000));
        assert_eq!(parse_size("8 MiB"), None);
        assert_eq!(parse_size("MiB"), None);
    }
}
