//! Wire model of the Instance images and security groups the NodeClass
//! reconciler looks up (`GET /images`, `GET /images/{id}`,
//! `GET /security_groups/{id}`). Images are per zone and per architecture:
//! an image imported in fr-par-2 does not exist in nl-ams-1.

use serde::{Deserialize, Serialize};

use super::Arch;

/// `available`, `creating`, `error`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ImageState {
    Available,
    Creating,
    Error,
    #[default]
    #[serde(other)]
    Other,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Image {
    pub id: String,
    pub name: String,
    pub arch: Arch,
    #[serde(default)]
    pub state: ImageState,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default)]
    pub project: String,
    #[serde(default)]
    pub public: bool,
    #[serde(default)]
    pub zone: String,
    /// RFC 3339; the newest of several matching images wins.
    #[serde(default)]
    pub creation_date: Option<String>,
}

/// Query filters of `GET /images`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ImageFilter {
    /// Exactly this name (the API may match more; refiltered here).
    pub name: Option<String>,
    /// Images carrying every one of these tags.
    pub tags: Vec<String>,
    pub project: Option<String>,
    pub arch: Option<Arch>,
}

impl ImageFilter {
    /// The filter applied on our side.
    pub fn matches(&self, image: &Image) -> bool {
        self.name.as_ref().is_none_or(|n| &image.name == n)
            && self.tags.iter().all(|t| image.tags.contains(t))
            && self
                .project
                .as_ref()
                .is_none_or(|p| image.project.is_empty() || &image.project == p)
            && self.arch.is_none_or(|a| image.arch == a)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecurityGroup {
    pub id: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub project: String,
    #[serde(default)]
    pub zone: String,
}
