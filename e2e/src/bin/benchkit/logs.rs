//! What the provider's log says about throttling: how the 429s emsim
//! answered were absorbed (the client's retries, calls that gave up after
//! them, RPCs that failed back to Karpenter).

use std::collections::BTreeMap;
use std::path::Path;

/// Throttling as the provider lived it, from its log.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Throttling {
    /// The client waited and tried again after a 429 (`retrying Scaleway
    /// API call … throttled`), by path template.
    pub retried: BTreeMap<String, u64>,
    /// Calls that still got a 429 on their last attempt and returned the
    /// error to their caller (the install engine polls again at its next
    /// turn; Create fails and Karpenter calls it again).
    pub gave_up: BTreeMap<String, u64>,
    /// gRPC calls from Karpenter that failed, by RPC (any cause).
    pub rpc_failures: BTreeMap<String, u64>,
}

impl Throttling {
    pub fn read(log: &Path) -> Throttling {
        Throttling::parse(&std::fs::read_to_string(log).unwrap_or_default())
    }

    pub fn parse(text: &str) -> Throttling {
        let mut t = Throttling::default();
        for line in text.lines() {
            let throttled = line.contains("throttled by the API");
            if throttled && line.contains("retrying Scaleway API call") {
                *t.retried.entry(path_template(line)).or_default() += 1;
            } else if throttled && line.contains("Scaleway API call failed") {
                *t.gave_up.entry(path_template(line)).or_default() += 1;
            } else if line.contains(" call failed")
                && let Some(rpc) = field(line, "rpc")
            {
                *t.rpc_failures.entry(rpc.to_string()).or_default() += 1;
            }
        }
        t
    }
}

/// `key=value` of a text-format tracing line (unquoted values).
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let at = line.find(&format!(" {key}="))? + key.len() + 2;
    line[at..]
        .split_whitespace()
        .next()
        .map(|v| v.trim_matches('"'))
}

/// The `path=` of a client log line with ids replaced by their role.
fn path_template(line: &str) -> String {
    let method = field(line, "method").unwrap_or("?");
    let path = field(line, "path").unwrap_or("?");
    let segments: Vec<String> = path
        .split('/')
        .enumerate()
        .map(|(i, s)| {
            let after = path.split('/').nth(i.wrapping_sub(1)).unwrap_or("");
            match after {
                "zones" => "{zone}".to_string(),
                "servers" | "offers" | "ssh-keys" if s.len() >= 32 => format!("{{{after}_id}}"),
                _ => s.to_string(),
            }
        })
        .collect();
    format!("{method} {}", segments.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_retries_give_ups_and_failed_rpcs() {
        let log = "\
2026-11-24T07:48:41Z  WARN install{server_id=a}: karpenter_scaleway::scaleway::client: retrying Scaleway API call method=GET path=/baremetal/v1/zones/fr-par-2/servers/0f69d3b0-33e7-464a-8ff2-672b54fbb7c3 attempt=1 error=throttled by the API delay_ms=120
2026-11-24T07:48:42Z  WARN karpenter_scaleway::scaleway::client: retrying Scaleway API call method=POST path=/baremetal/v1/zones/fr-par-2/servers attempt=2 error=throttled by the API delay_ms=300
2026-11-24T07:48:43Z DEBUG karpenter_scaleway::scaleway::client: Scaleway API call failed method=GET path=/baremetal/v1/zones/fr-par-2/servers/0f69d3b0-33e7-464a-8ff2-672b54fbb7c3 attempt=5 error=throttled by the API
2026-11-24T07:48:44Z  WARN karpenter_scaleway::grpc: call failed rpc=Create subject=bench-x error=create failed
2026-11-24T07:48:45Z  WARN karpenter_scaleway::scaleway::client: retrying Scaleway API call method=GET path=/x attempt=1 error=API unavailable: 503 delay_ms=1
";
        let t = Throttling::parse(log);
        let get = "GET /baremetal/v1/zones/{zone}/servers/{servers_id}";
        let post = "POST /baremetal/v1/zones/{zone}/servers";
        assert_eq!(t.retried.get(get), Some(&1));
        assert_eq!(t.retried.get(post), Some(&1));
        assert_eq!(t.retried.len(), 2, "a 503 retry is not throttling");
        assert_eq!(t.gave_up.get(get), Some(&1));
        assert_eq!(t.rpc_failures.get("Create"), Some(&1));
    }
}
