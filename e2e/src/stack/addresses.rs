//! Loopback address blocks, one per stack, so that concurrent stacks never
//! contend for a simulated server's address.

use anyhow::{Context, Result, bail};

use super::{SSH_PORT, TALOS_PORT};

/// The first and last second octet of the loopback blocks handed to stacks:
/// `127.100.0.0/16` ..= `127.250.0.0/16`, clear of emsim's default
/// `127.77.0.0/16` (a hand-started emsim or demo) and of `127.0.0.0/16`.
const FIRST_BLOCK: u8 = 100;
const LAST_BLOCK: u8 = 250;

/// A loopback `/16` reserved for one stack's simulated servers: emsim hands
/// out server addresses from it and talos-sim listens on them (SSH, Talos
/// API), so two stacks with different blocks never contend for an address
/// even though both use the same ports.
///
/// The reservation is an exclusive `flock` on `<tmp>/kps-e2e-blocks/127.N.lock`,
/// held for the stack's lifetime. flock locks belong to the open file, so
/// they exclude other stacks of the same process as well as other processes,
/// and the kernel drops them when the holder dies, so a crashed run leaves no
/// stale reservation.
#[derive(Debug)]
pub struct AddressBlock {
    octet: u8,
    _lock: std::fs::File,
}

impl AddressBlock {
    pub fn reserve() -> Result<AddressBlock> {
        let dir = std::env::temp_dir().join("kps-e2e-blocks");
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        // Start at a block derived from the pid so that concurrent processes
        // rarely probe the same locks first.
        let span = u32::from(LAST_BLOCK - FIRST_BLOCK) + 1;
        let start = std::process::id() % span;
        for i in 0..span {
            let octet = FIRST_BLOCK + ((start + i) % span) as u8;
            let Some(file) = crate::procs::try_lease(&dir.join(format!("127.{octet}.lock")))?
            else {
                continue;
            };
            // Something outside our locks (a hand-started simulator) may
            // still listen in the block: check the addresses talos-sim takes.
            if !block_is_free(octet) {
                continue;
            }
            tracing::info!(block = %format!("127.{octet}.0.0/16"), "address block reserved");
            return Ok(AddressBlock { octet, _lock: file });
        }
        bail!(
            "every loopback block 127.{FIRST_BLOCK}..=127.{LAST_BLOCK} is in use (locks in {})",
            dir.display()
        )
    }

    /// `127.N.0.0/16`, emsim's `--ip-range`.
    pub fn cidr(&self) -> String {
        format!("127.{}.0.0/16", self.octet)
    }

    pub fn octet(&self) -> u8 {
        self.octet
    }
}

/// True when nothing listens on the SSH or Talos port of the first server
/// addresses emsim hands out (`.10` onwards) in `127.octet.0.0/16`.
fn block_is_free(octet: u8) -> bool {
    (10..14).all(|host| {
        [SSH_PORT, TALOS_PORT].iter().all(|port| {
            std::net::TcpListener::bind((std::net::Ipv4Addr::new(127, octet, 0, host), *port))
                .is_ok()
        })
    })
}
