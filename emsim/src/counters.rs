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
}
