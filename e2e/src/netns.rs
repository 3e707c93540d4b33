//! A host address that is not loopback, for what the API server refuses to
//! reach on one: it proxies to a Pod (`pods/proxy`) only at a global unicast
//! address, and Karpenter core's performance suite reads Karpenter's
//! `/metrics` that way. The address is the host end of a veth pair whose
//! other end lives in a network namespace this harness creates, in the
//! RFC 2544 benchmarking range (198.18.0.0/15, never routed): nothing leaves
//! the machine, and the namespace and the pair are deleted when the value
//! is dropped. Needs root (`ip netns`, `ip link`).

use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail, ensure};

/// Where the leases of the `/30`s live (one per index, held while in use).
const LEASES: &str = "kps-e2e-netns";

/// `198.18.<index>.1/30` on the host end of a veth pair into namespace
/// `kps-<index>`.
pub struct HostAddress {
    pub ip: Ipv4Addr,
    /// The namespace end's address, `198.18.<index>.2`.
    pub inside: Ipv4Addr,
    namespace: String,
    link: String,
    _lease: std::fs::File,
}

fn ip(args: &[&str]) -> Result<()> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .with_context(|| format!("running ip {}", args.join(" ")))?;
    ensure!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}

impl HostAddress {
    /// Leases a free index, then creates the namespace and the pair (what a
    /// crashed run of the same index left is deleted first: the lease proves
    /// nobody uses it).
    pub fn create() -> Result<Self> {
        let dir = std::env::temp_dir().join(LEASES);
        std::fs::create_dir_all(&dir)?;
        for index in 0..=255u8 {
            let Some(lease) = crate::procs::try_lease(&dir.join(format!("{index}.lock")))? else {
                continue;
            };
            let namespace = format!("kps-{index}");
            let link = format!("kpsh{index}");
            let _ = ip(&["link", "del", &link]);
            if Path::new("/run/netns").join(&namespace).exists() {
                let _ = ip(&["netns", "del", &namespace]);
            }
            let host = Ipv4Addr::new(198, 18, index, 1);
            let inside = Ipv4Addr::new(198, 18, index, 2);
            let made = HostAddress {
                ip: host,
                inside,
                namespace: namespace.clone(),
                link: link.clone(),
                _lease: lease,
            };
            ip(&["netns", "add", &namespace])?;
            ip(&[
                "link", "add", &link, "type", "veth", "peer", "name", "eth0", "netns", &namespace,
            ])?;
            ip(&["addr", "add", &format!("{host}/30"), "dev", &link])?;
            ip(&["link", "set", &link, "up"])?;
            ip(&[
                "-n",
                &namespace,
                "addr",
                "add",
                &format!("{inside}/30"),
                "dev",
                "eth0",
            ])?;
            ip(&["-n", &namespace, "link", "set", "eth0", "up"])?;
            ip(&["-n", &namespace, "link", "set", "lo", "up"])?;
            return Ok(made);
        }
        bail!("all 256 benchmark /30s of 198.18.0.0/16 are leased")
    }
}

impl HostAddress {
    /// The namespace, as `setns` opens it.
    pub fn netns_path(&self) -> std::path::PathBuf {
        Path::new("/run/netns").join(&self.namespace)
    }
}

impl Drop for HostAddress {
    fn drop(&mut self) {
        let _ = ip(&["link", "del", &self.link]);
        let _ = ip(&["netns", "del", &self.namespace]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Needs root, as `kps-perf` does (CI runs as root).
    #[tokio::test]
    async fn the_address_takes_connections_and_is_gone_after_drop() {
        let address = HostAddress::create().expect("ip netns and a veth pair (root)");
        assert!(!address.ip.is_loopback() && address.ip.octets()[..2] == [198, 18]);
        let listener = tokio::net::TcpListener::bind((address.ip, 0))
            .await
            .unwrap();
        let port = listener.local_addr().unwrap().port();
        let accept = tokio::spawn(async move { listener.accept().await.map(|_| ()) });
        tokio::net::TcpStream::connect((address.ip, port))
            .await
            .unwrap();
        accept.await.unwrap().unwrap();

        // A forwarder listening inside the namespace reaches a host
        // listener, and leaves its port free on the host.
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let echo = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target = echo.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = echo.accept().await.unwrap();
            let mut buf = [0u8; 5];
            s.read_exact(&mut buf).await.unwrap();
            s.write_all(&buf).await.unwrap();
        });
        let fwd = crate::perf::Forwarder::start_in(
            Some(&address.netns_path()),
            (address.inside, 0).into(),
            target,
        )
        .await
        .unwrap();
        let mut c = tokio::net::TcpStream::connect(fwd.listen).await.unwrap();
        c.write_all(b"hello").await.unwrap();
        let mut back = [0u8; 5];
        c.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"hello");
        std::net::TcpListener::bind(("0.0.0.0", fwd.listen.port()))
            .expect("the namespace's port is not the host's");
        drop(fwd);

        let (ip, namespace) = (address.ip, address.namespace.clone());
        drop(address);
        assert!(!Path::new("/run/netns").join(&namespace).exists());
        assert!(
            std::net::TcpListener::bind((ip, 0)).is_err(),
            "{ip} is still a host address"
        );
    }
}
