//! Request parsing that fails with API-shaped errors: JSON bodies, query strings
//! with repeated parameters (`tags=a&tags=b`, as the SDK sends them), pagination.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::catalog::ZONES;
use crate::error::ApiError;

/// A JSON body; an empty body reads as `{}` (the SDK sends `{}` or nothing for
/// calls without arguments).
pub struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = Bytes::from_request(req, state)
            .await
            .map_err(|e| ApiError::invalid("body", "constraint", e.body_text()))?;
        let text: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
            b"{}"
        } else {
            &bytes
        };
        serde_json::from_slice(text)
            .map(ApiJson)
            .map_err(|e| ApiError::invalid("body", "constraint", e.to_string()))
    }
}

/// The query string as ordered pairs, repeated keys kept.
#[derive(Debug, Default)]
pub struct Params(Vec<(String, String)>);

impl<S: Send + Sync> FromRequestParts<S> for Params {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let query = parts.uri.query().unwrap_or("");
        Ok(Params(
            form_urlencoded::parse(query.as_bytes())
                .into_owned()
                .collect(),
        ))
    }
}

impl Params {
    /// The last value of `name`, empty values treated as absent.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, v)| k == name && !v.is_empty())
            .map(|(_, v)| v.as_str())
    }

    /// Every non-empty value of a repeated parameter.
    pub fn all(&self, name: &str) -> Vec<String> {
        self.0
            .iter()
            .filter(|(k, v)| k == name && !v.is_empty())
            .map(|(_, v)| v.clone())
            .collect()
    }

    fn number(&self, name: &str) -> Result<Option<u64>, ApiError> {
        self.get(name)
            .map(|v| {
                v.parse::<u64>().map_err(|_| {
                    ApiError::invalid(name, "constraint", "must be a positive integer")
                })
            })
            .transpose()
    }

    /// `page` (1-based) and `page_size` (1..=100).
    pub fn page(&self, default_size: u64) -> Result<Page, ApiError> {
        let page = self.number("page")?.unwrap_or(1);
        if page < 1 {
            return Err(ApiError::invalid(
                "page",
                "constraint",
                "must be at least 1",
            ));
        }
        let size = self.number("page_size")?.unwrap_or(default_size);
        if !(1..=100).contains(&size) {
            return Err(ApiError::invalid(
                "page_size",
                "constraint",
                "must be between 1 and 100",
            ));
        }
        Ok(Page { page, size })
    }

    /// The Instance API's paging: `page` (1-based) and `per_page` (1..=100,
    /// default 50).
    pub fn per_page(&self) -> Result<Page, ApiError> {
        let page = self.number("page")?.unwrap_or(1);
        if page < 1 {
            return Err(ApiError::invalid(
                "page",
                "constraint",
                "must be at least 1",
            ));
        }
        let size = self.number("per_page")?.unwrap_or(50);
        if !(1..=100).contains(&size) {
            return Err(ApiError::invalid(
                "per_page",
                "constraint",
                "must be between 1 and 100",
            ));
        }
        Ok(Page { page, size })
    }

    /// Every value of a list parameter, sent comma-joined (`tags=a,b`, as the
    /// Instance SDK does) or repeated.
    pub fn list(&self, name: &str) -> Vec<String> {
        self.all(name)
            .iter()
            .flat_map(|v| v.split(','))
            .filter(|v| !v.is_empty())
            .map(str::to_string)
            .collect()
    }

    /// `order_by` among `allowed`, the first one being the default.
    pub fn order_by<'a>(&self, allowed: &[&'a str]) -> Result<&'a str, ApiError> {
        match self.get("order_by") {
            None => Ok(allowed[0]),
            Some(v) => allowed.iter().find(|a| **a == v).copied().ok_or_else(|| {
                ApiError::invalid(
                    "order_by",
                    "constraint",
                    format!("one of {}", allowed.join(", ")),
                )
            }),
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Page {
    pub page: u64,
    pub size: u64,
}

impl Page {
    /// The `Link` header of the Instance API's lists for this page of
    /// `total` items (recorded: `</products/servers?page=2&per_page=50&>;
    /// rel="next",</products/servers?page=3&per_page=50&>; rel="last"`),
    /// `path` being the path after the zone. None when there is no item.
    pub fn link(&self, path: &str, total: u64) -> Option<String> {
        let last = total.div_ceil(self.size);
        if last == 0 {
            return None;
        }
        let url = |page: u64| format!("<{path}?page={page}&per_page={}&>", self.size);
        let mut links = Vec::new();
        if self.page < last {
            links.push(format!("{}; rel=\"next\"", url(self.page + 1)));
        }
        links.push(format!("{}; rel=\"last\"", url(last)));
        Some(links.join(","))
    }

    /// The items of this page and the total count.
    pub fn slice<T>(&self, items: Vec<T>) -> (Vec<T>, u64) {
        let total = items.len() as u64;
        let skip = (self.page - 1).saturating_mul(self.size);
        let items = items
            .into_iter()
            .skip(usize::try_from(skip).unwrap_or(usize::MAX))
            .take(self.size as usize)
            .collect();
        (items, total)
    }
}

pub fn check_zone(zone: &str) -> Result<(), ApiError> {
    if ZONES.contains(&zone) {
        Ok(())
    } else {
        Err(ApiError::invalid(
            "zone",
            "constraint",
            format!("unknown zone {zone}, expected one of {}", ZONES.join(", ")),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(q: &str) -> Params {
        Params(form_urlencoded::parse(q.as_bytes()).into_owned().collect())
    }

    #[test]
    fn repeated_and_encoded_parameters() {
        let p = params("tags=a%3Db&tags=c&status=ready&name=&page=2");
        assert_eq!(p.all("tags"), vec!["a=b", "c"]);
        assert_eq!(p.get("status"), Some("ready"));
        assert_eq!(p.get("name"), None);
        let page = p.page(50).unwrap();
        assert_eq!((page.page, page.size), (2, 50));
    }

    #[test]
    fn pagination_bounds() {
        assert!(params("page=0").page(50).is_err());
        assert!(params("page_size=101").page(50).is_err());
        assert!(params("page=x").page(50).is_err());
        let (items, total) = params("page=2&page_size=2")
            .page(50)
            .unwrap()
            .slice(vec![1, 2, 3, 4, 5]);
        assert_eq!((items, total), (vec![3, 4], 5));
        let (items, total) = params("page=9&page_size=2")
            .page(50)
            .unwrap()
            .slice(vec![1, 2, 3]);
        assert_eq!((items, total), (vec![], 3));
    }

    #[test]
    fn instance_paging_and_link_header() {
        assert!(params("per_page=101").per_page().is_err());
        assert!(params("per_page=0").per_page().is_err());
        let page = params("").per_page().unwrap();
        assert_eq!((page.page, page.size), (1, 50));
        assert_eq!(
            page.link("/products/servers", 135).unwrap(),
            r#"</products/servers?page=2&per_page=50&>; rel="next",</products/servers?page=3&per_page=50&>; rel="last""#
        );
        let last = params("page=3").per_page().unwrap();
        assert_eq!(
            last.link("/servers", 135).unwrap(),
            r#"</servers?page=3&per_page=50&>; rel="last""#
        );
        assert_eq!(page.link("/servers", 0), None);
        assert_eq!(params("tags=a,b&tags=c").list("tags"), vec!["a", "b", "c"]);
    }

    #[test]
    fn order_by_defaults_and_validates() {
        let allowed = ["created_at_asc", "created_at_desc"];
        assert_eq!(params("").order_by(&allowed).unwrap(), "created_at_asc");
        assert_eq!(
            params("order_by=created_at_desc")
                .order_by(&allowed)
                .unwrap(),
            "created_at_desc"
        );
        assert!(params("order_by=name").order_by(&allowed).is_err());
    }
}
