//! The loopback addresses handed to servers (`docs/simulator-contracts.md`):
//! hosts of `--ip-range` starting at `.10`, given out round-robin so that an
//! address freed by a deletion is not reused at once (talos-sim may still be
//! tearing the old server down).

use std::collections::HashSet;
use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

/// An IPv4 CIDR block such as `127.77.0.0/16`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpRange {
    network: u32,
    prefix: u8,
}

impl IpRange {
    /// Network address and prefix length.
    pub fn cidr(&self) -> (Ipv4Addr, u8) {
        (Ipv4Addr::from(self.network), self.prefix)
    }

    /// First and last host handed out.
    fn hosts(&self) -> (u32, u32) {
        let size = 1u64 << (32 - u32::from(self.prefix));
        let last = (u64::from(self.network) + size - 2) as u32; // skip broadcast
        (self.network + 10, last)
    }
}

impl FromStr for IpRange {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (addr, prefix) = s.split_once('/').ok_or("expected a.b.c.d/len")?;
        let addr: Ipv4Addr = addr.parse().map_err(|e| format!("bad address: {e}"))?;
        let prefix: u8 = prefix
            .parse()
            .map_err(|e| format!("bad prefix length: {e}"))?;
        if !(8..=27).contains(&prefix) {
            return Err("prefix length must be between 8 and 27".into());
        }
        let mask = u32::MAX << (32 - prefix);
        Ok(Self {
            network: u32::from(addr) & mask,
            prefix,
        })
    }
}

impl fmt::Display for IpRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", Ipv4Addr::from(self.network), self.prefix)
    }
}

#[derive(Debug, Clone)]
pub struct IpPool {
    range: IpRange,
    next: u32,
    used: HashSet<u32>,
}

impl IpPool {
    pub fn new(range: IpRange) -> Self {
        Self {
            range,
            next: range.hosts().0,
            used: HashSet::new(),
        }
    }

    pub fn allocate(&mut self) -> Option<Ipv4Addr> {
        let (first, last) = self.range.hosts();
        let count = last - first + 1;
        for _ in 0..count {
            let candidate = self.next;
            self.next = if candidate >= last {
                first
            } else {
                candidate + 1
            };
            if self.used.insert(candidate) {
                return Some(Ipv4Addr::from(candidate));
            }
        }
        None
    }

    pub fn release(&mut self, addr: Ipv4Addr) {
        self.used.remove(&u32::from(addr));
    }

    /// Index of an address within the range, used to derive a matching IPv6.
    pub fn offset(&self, addr: Ipv4Addr) -> u32 {
        u32::from(addr) - self.range.network
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hands_out_from_dot_ten_round_robin() {
        let mut pool = IpPool::new("127.77.0.0/16".parse().unwrap());
        let a = pool.allocate().unwrap();
        let b = pool.allocate().unwrap();
        assert_eq!(a, Ipv4Addr::new(127, 77, 0, 10));
        assert_eq!(b, Ipv4Addr::new(127, 77, 0, 11));
        pool.release(a);
        assert_eq!(pool.allocate().unwrap(), Ipv4Addr::new(127, 77, 0, 12));
        assert_eq!(pool.offset(b), 11);
    }

    #[test]
    fn wraps_and_reports_exhaustion() {
        // /27: hosts .10 ..= .30 (21 addresses).
        let mut pool = IpPool::new("127.5.0.0/27".parse().unwrap());
        let all: Vec<_> = (0..21).map(|_| pool.allocate().unwrap()).collect();
        assert_eq!(all.last().unwrap(), &Ipv4Addr::new(127, 5, 0, 30));
        assert_eq!(pool.allocate(), None);
        pool.release(Ipv4Addr::new(127, 5, 0, 15));
        assert_eq!(pool.allocate(), Some(Ipv4Addr::new(127, 5, 0, 15)));
    }

    #[test]
    fn parses_and_normalises_ranges() {
        let r: IpRange = "127.77.3.4/16".parse().unwrap();
        assert_eq!(r.to_string(), "127.77.0.0/16");
        assert!("127.0.0.1".parse::<IpRange>().is_err());
        assert!("127.0.0.0/30".parse::<IpRange>().is_err());
    }
}
