//! Calls per `METHOD /path-template` and per response status, for tests that
//! assert how the provider used the API (`GET /_emsim/counters`).

use std::collections::BTreeMap;

use serde::Serialize;

#[derive(Debug, Default, Clone, Serialize)]
pub struct Count {
    pub total: u64,
    /// Status code (as a string key in JSON) to calls.
    pub by_status: BTreeMap<u16, u64>,
}

impl Count {
    fn add(&mut self, status: u16) {
        self.total += 1;
        *self.by_status.entry(status).or_default() += 1;
    }
}

#[derive(Debug, Default, Clone, Serialize)]
pub struct Counters {
    pub total: u64,
    pub by_status: BTreeMap<u16, u64>,
    pub endpoints: BTreeMap<String, Count>,
    /// Calls naming one server in their path (`/servers/{server_id}...`),
    /// per server id and endpoint: what each install cost.
    pub servers: BTreeMap<String, BTreeMap<String, Count>>,
}

impl Counters {
    pub fn record(&mut self, endpoint: &str, status: u16) {
        self.total += 1;
        *self.by_status.entry(status).or_default() += 1;
        self.endpoints
            .entry(endpoint.to_string())
            .or_default()
            .add(status);
    }

    /// Counts a call of `endpoint` about server `server_id` as well.
    pub fn record_for_server(&mut self, server_id: &str, endpoint: &str, status: u16) {
        self.servers
            .entry(server_id.to_string())
            .or_default()
            .entry(endpoint.to_string())
            .or_default()
            .add(status);
    }
}

/// The server id of a call's path, when its endpoint names one.
pub fn server_of<'a>(endpoint: &str, path: &'a str) -> Option<&'a str> {
    if !endpoint.contains("/servers/{server_id}") {
        return None;
    }
    let mut segments = path.split('/');
    segments.find(|s| *s == "servers")?;
    segments.next().filter(|id| !id.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_per_endpoint_and_status() {
        let mut c = Counters::default();
        c.record("GET /a/{id}", 200);
        c.record("GET /a/{id}", 404);
        c.record("POST /a", 200);
        assert_eq!(c.total, 3);
        assert_eq!(c.by_status[&200], 2);
        assert_eq!(c.endpoints["GET /a/{id}"].total, 2);
        assert_eq!(c.endpoints["GET /a/{id}"].by_status[&404], 1);
        let json = serde_json::to_value(&c).unwrap();
        assert_eq!(json["endpoints"]["POST /a"]["by_status"]["200"], 1);
    }

    #[test]
    fn calls_about_one_server_are_counted_for_it() {
        let get = "GET /baremetal/v1/zones/{zone}/servers/{server_id}";
        let id = server_of(get, "/baremetal/v1/zones/fr-par-2/servers/abc").unwrap();
        assert_eq!(id, "abc");
        let reboot = "POST /baremetal/v1/zones/{zone}/servers/{server_id}/reboot";
        assert_eq!(
            server_of(reboot, "/baremetal/v1/zones/fr-par-2/servers/abc/reboot"),
            Some("abc")
        );
        let list = "GET /baremetal/v1/zones/{zone}/servers";
        assert_eq!(
            server_of(list, "/baremetal/v1/zones/fr-par-2/servers"),
            None
        );
        let mut c = Counters::default();
        c.record_for_server(id, get, 200);
        c.record_for_server(id, get, 429);
        let json = serde_json::to_value(&c).unwrap();
        assert_eq!(json["servers"]["abc"][get]["total"], 2);
        assert_eq!(json["servers"]["abc"][get]["by_status"]["429"], 1);
    }
}
