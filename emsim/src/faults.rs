//! Injected failures (`POST /_emsim/faults`). A fault matches one endpoint
//! (`METHOD /path-template`, as in the counters) and answers instead of the
//! handler, before authentication, for `count` calls or until cleared.
//!
//! Kept as data (`FaultSpec` -> `Fault`) so that later kinds (latency, dropped
//! connections, matching on zone or server id, probabilities) are new fields and
//! variants, not a new mechanism.

use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::ApiError;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultSpec {
    /// `METHOD /path-template`, e.g. `POST /baremetal/v1/zones/{zone}/servers`.
    pub endpoint: String,
    pub status: u16,
    /// JSON body to answer; absent means an empty body (as the real 429 once was).
    #[serde(default)]
    pub body: Option<Value>,
    /// How many calls fail; absent means every call until `DELETE /_emsim/faults`.
    #[serde(default)]
    pub count: Option<u32>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Fault {
    #[serde(flatten)]
    pub spec: FaultSpec,
    /// Calls answered by this fault so far.
    pub fired: u64,
}

#[derive(Debug, Default)]
pub struct Faults {
    active: Vec<Fault>,
}

impl Faults {
    /// `known` lists the endpoints that exist, to catch typos in tests.
    pub fn add(&mut self, spec: FaultSpec, known: &[String]) -> Result<Fault, ApiError> {
        if StatusCode::from_u16(spec.status).is_err() || spec.status < 200 {
            return Err(ApiError::invalid(
                "status",
                "constraint",
                "an HTTP status between 200 and 999",
            ));
        }
        if !known.iter().any(|k| k == &spec.endpoint) {
            return Err(ApiError::invalid(
                "endpoint",
                "constraint",
                format!(
                    "unknown endpoint {:?}; known: {}",
                    spec.endpoint,
                    known.join(", ")
                ),
            ));
        }
        if spec.count == Some(0) {
            return Err(ApiError::invalid(
                "count",
                "constraint",
                "at least 1, or absent for no limit",
            ));
        }
        let fault = Fault { spec, fired: 0 };
        self.active.push(fault.clone());
        Ok(fault)
    }

    /// The error to answer for a call to `endpoint`, if a fault matches; the
    /// oldest matching fault fires first.
    pub fn take(&mut self, endpoint: &str) -> Option<ApiError> {
        let index = self
            .active
            .iter()
            .position(|f| f.spec.endpoint == endpoint)?;
        let fault = &mut self.active[index];
        fault.fired += 1;
        let error = ApiError::Injected {
            status: StatusCode::from_u16(fault.spec.status).expect("validated on add"),
            body: fault.spec.body.clone(),
        };
        if let Some(count) = fault.spec.count.as_mut() {
            *count -= 1;
            if *count == 0 {
                self.active.remove(index);
            }
        }
        Some(error)
    }

    pub fn list(&self) -> &[Fault] {
        &self.active
    }

    pub fn clear(&mut self) {
        self.active.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known() -> Vec<String> {
        vec!["GET /x".to_string(), "POST /x".to_string()]
    }

    #[test]
    fn counted_fault_fires_then_expires() {
        let mut f = Faults::default();
        f.add(
            FaultSpec {
                endpoint: "GET /x".into(),
                status: 503,
                body: Some(serde_json::json!({"message": "boom"})),
                count: Some(2),
            },
            &known(),
        )
        .unwrap();
        assert!(f.take("POST /x").is_none());
        let e = f.take("GET /x").unwrap();
        assert_eq!(e.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(e.body().unwrap()["message"], "boom");
        assert!(f.take("GET /x").is_some());
        assert!(f.take("GET /x").is_none());
        assert!(f.list().is_empty());
    }

    #[test]
    fn unlimited_fault_holds_until_cleared() {
        let mut f = Faults::default();
        let spec = FaultSpec {
            endpoint: "POST /x".into(),
            status: 429,
            body: None,
            count: None,
        };
        f.add(spec, &known()).unwrap();
        for _ in 0..5 {
            assert!(f.take("POST /x").unwrap().body().is_none());
        }
        assert_eq!(f.list()[0].fired, 5);
        f.clear();
        assert!(f.take("POST /x").is_none());
    }

    #[test]
    fn rejects_unknown_endpoints_and_bad_status() {
        let mut f = Faults::default();
        let bad = |endpoint: &str, status| FaultSpec {
            endpoint: endpoint.into(),
            status,
            body: None,
            count: None,
        };
        assert!(f.add(bad("GET /nope", 500), &known()).is_err());
        assert!(f.add(bad("GET /x", 42), &known()).is_err());
        assert!(f.add(bad("GET /x", 1000), &known()).is_err());
    }
}
