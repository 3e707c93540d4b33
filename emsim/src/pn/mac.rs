//! The MAC of an Elastic Metal server's NIC, derived from its id exactly as
//! talos-sim derives the NIC it plays (`talos-sim/src/model.rs` `mac_for`:
//! the first six bytes of SHA-256(id), locally administered, unicast), so
//! that IPAM's `resource.mac_address` and the simulated `ip link` agree.

use sha2::{Digest, Sha256};

/// The NIC MAC of Elastic Metal server `server_id`.
pub fn em_mac(server_id: &str) -> String {
    let digest = Sha256::digest(server_id.as_bytes());
    let mut bytes = [0u8; 6];
    bytes.copy_from_slice(&digest[..6]);
    bytes[0] = (bytes[0] & 0xfc) | 0x02;
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_are_stable_local_unicast() {
        let a = em_mac("server-a");
        assert_eq!(a, em_mac("server-a"));
        assert_ne!(a, em_mac("server-b"));
        let first = u8::from_str_radix(&a[..2], 16).unwrap();
        assert_eq!(first & 0x03, 0x02, "{a}");
        // SHA-256("server-a") = a79b8498a1fb...: a7 → a6 (local, unicast).
        assert_eq!(a, "a6:9b:84:98:a1:fb");
    }
}
