//! Scaleway API settings as Scaleway's own tools find them: command-line
//! flags, then `SCW_*` variables, then the scw config file's active profile
//! merged over its default profile.
//!
//! What the official tools do, read from scaleway-sdk-go (`scw/`) at
//! 2c5cd81b (2026-08-20), with the scw CLI and the Terraform provider as
//! its callers:
//!
//! - Path (`path.go` `GetConfigPath`, `GetScwConfigDir`): `$SCW_CONFIG_PATH`
//!   if not empty, else `$XDG_CONFIG_HOME/scw/config.yaml` if that variable
//!   is not empty, else `$HOME/.config/scw/config.yaml`. Legacy
//!   (`config.go` `LoadConfig`): without `SCW_CONFIG_PATH`, a missing
//!   `config.yaml` falls back to `config.yml` in the same directory.
//! - Absent, unreadable, invalid (`config.go` `LoadConfigFromPath`): a
//!   missing file is a `ConfigFileNotFoundError`, which the CLI
//!   (`internal/platform/terminal` `CreateClient`) and Terraform treat as
//!   "environment only"; a file that exists but cannot be read, or is not
//!   valid YAML ("content of config file %s is invalid"), is an error.
//!   Permissions other than 0600 print a warning.
//! - Format (`config.go` `Config`, `Profile`): the default profile's keys
//!   at the top level (`access_key`, `secret_key`, `default_organization_id`,
//!   `default_project_id`, `default_region`, `default_zone`, `api_url`,
//!   `insecure`, `send_telemetry`, `s3_*`, `user_agent`), `active_profile`,
//!   and `profiles: {name: {same keys}}`. Unknown keys are ignored.
//! - Which profile (`config.go` `GetActiveProfile`, `GetProfile`):
//!   `SCW_PROFILE` if not empty, else `active_profile`, else the top level.
//!   The name `default` is reserved for the top level. A named profile is
//!   merged key by key over the top level (`MergeProfiles`: every key it
//!   sets wins). A name that is not under `profiles` is an error ("given
//!   profile %s does not exist"), and so is an empty name. With no file
//!   the Terraform provider still calls `GetActiveProfile` (on an empty
//!   `Config`), so a named profile is an error there; the scw CLI skips
//!   profiles then. This follows Terraform: a profile asked for and not
//!   found is a mistake worth stopping on.
//! - Environment (`env.go` `LoadEnvProfile`, merged over the profile by
//!   `MergeProfiles(activeProfile, envProfile)` in the CLI and Terraform, or
//!   `WithProfile(p)` then `WithEnv()` per `README.md`): a variable that is
//!   set, even empty, wins over the profile key by key. `SCW_ACCESS_KEY`
//!   (else `SCALEWAY_ACCESS_KEY`), `SCW_SECRET_KEY` (else `SCW_TOKEN`,
//!   `SCALEWAY_TOKEN`, `SCALEWAY_ACCESS_KEY`), `SCW_DEFAULT_ORGANIZATION_ID`,
//!   `SCW_DEFAULT_PROJECT_ID`, `SCW_DEFAULT_REGION`, `SCW_DEFAULT_ZONE`
//!   (README lists `SCW_ZONE` too, but `LoadEnvProfile` does not read it),
//!   `SCW_API_URL`. The deprecated names print a warning.
//! - Flags given to the tool win over all of that.
//!
//! The provider uses five of those settings (access key, secret key,
//! project, API URL, default zone); the other keys are accepted and unused.
//! Two deliberate differences: with no `HOME` (nor `XDG_CONFIG_HOME`, nor
//! `SCW_CONFIG_PATH`) the SDK ends up reading `.` and fails, while here
//! there is then no file to read; and an access key equal to the secret key
//! (`SCALEWAY_ACCESS_KEY` alone sets both) is dropped, since it is logged.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use serde_yaml_ng::{Mapping, Value};

use crate::scaleway::SecretKey;

pub const DEFAULT_API_URL: &str = "https://api.scaleway.com";
pub const DEFAULT_ZONE: &str = "fr-par-2";

const CONFIG_PATH_VAR: &str = "SCW_CONFIG_PATH";
const PROFILE_VAR: &str = "SCW_PROFILE";
const XDG_CONFIG_HOME_VAR: &str = "XDG_CONFIG_HOME";
const HOME_VAR: &str = "HOME";
/// The reserved name of the top-level profile.
const DEFAULT_PROFILE: &str = "default";

/// A setting the provider takes from the scw configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    AccessKey,
    SecretKey,
    ProjectId,
    ApiUrl,
    DefaultZone,
}

impl Field {
    const ALL: [Field; 5] = [
        Field::AccessKey,
        Field::SecretKey,
        Field::ProjectId,
        Field::ApiUrl,
        Field::DefaultZone,
    ];

    fn index(self) -> usize {
        self as usize
    }

    /// Its key in the config file.
    fn key(self) -> &'static str {
        match self {
            Field::AccessKey => "access_key",
            Field::SecretKey => "secret_key",
            Field::ProjectId => "default_project_id",
            Field::ApiUrl => "api_url",
            Field::DefaultZone => "default_zone",
        }
    }

    /// Its variables: the current name, then the deprecated ones
    /// `LoadEnvProfile` still reads, in its order.
    fn vars(self) -> &'static [&'static str] {
        match self {
            Field::AccessKey => &["SCW_ACCESS_KEY", "SCALEWAY_ACCESS_KEY"],
            Field::SecretKey => &[
                "SCW_SECRET_KEY",
                "SCW_TOKEN",
                "SCALEWAY_TOKEN",
                "SCALEWAY_ACCESS_KEY",
            ],
            Field::ProjectId => &["SCW_DEFAULT_PROJECT_ID"],
            Field::ApiUrl => &["SCW_API_URL"],
            Field::DefaultZone => &["SCW_DEFAULT_ZONE"],
        }
    }

    fn flag(self) -> &'static str {
        match self {
            Field::AccessKey => "--scw-access-key",
            Field::SecretKey => "--scw-secret-key",
            Field::ProjectId => "--scw-project-id",
            Field::ApiUrl => "--scw-api-url",
            Field::DefaultZone => "--default-zone",
        }
    }

    fn what(self) -> &'static str {
        match self {
            Field::AccessKey => "access key",
            Field::SecretKey => "secret key",
            Field::ProjectId => "project id",
            Field::ApiUrl => "API URL",
            Field::DefaultZone => "default zone",
        }
    }
}

/// The variables the configuration reads, as a snapshot: the logic never
/// reads the process environment itself. Debug shows the names only.
#[derive(Clone, Default)]
pub struct Env(BTreeMap<String, String>);

impl Env {
    /// The process's values of the variables the configuration reads.
    pub fn from_process() -> Result<Env, ProfileError> {
        let names = [CONFIG_PATH_VAR, PROFILE_VAR, XDG_CONFIG_HOME_VAR, HOME_VAR]
            .into_iter()
            .chain(Field::ALL.iter().flat_map(|f| f.vars().iter().copied()));
        let mut env = Env::default();
        for name in names {
            match std::env::var(name) {
                Ok(value) => {
                    env.0.insert(name.to_string(), value);
                }
                Err(std::env::VarError::NotPresent) => {}
                Err(std::env::VarError::NotUnicode(_)) => {
                    return Err(ProfileError::NotUnicode { var: name });
                }
            }
        }
        Ok(env)
    }

    /// A variable that is set, even to an empty value.
    fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    fn non_empty(&self, name: &str) -> Option<&str> {
        self.get(name).filter(|v| !v.is_empty())
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for Env {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(pairs: I) -> Self {
        Env(pairs
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect())
    }
}

impl std::fmt::Debug for Env {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.0.keys()).finish()
    }
}

/// Values given on the command line: they win over everything.
#[derive(Debug, Clone, Default)]
pub struct Given {
    pub access_key: Option<String>,
    pub secret_key: Option<SecretKey>,
    pub project_id: Option<String>,
    pub api_url: Option<String>,
    pub default_zone: Option<String>,
}

/// The settings once every layer is merged.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub access_key: Option<String>,
    pub secret_key: SecretKey,
    pub project_id: String,
    pub api_url: String,
    pub default_zone: String,
    /// The profile read, for the logs: `profile "prod" in PATH`, `the
    /// default profile in PATH`; `None` when no file was read.
    pub profile: Option<String>,
    /// Warnings the scw tools print too: deprecated variables, a file that
    /// others may read.
    pub notes: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("{var} is not valid UTF-8")]
    NotUnicode { var: &'static str },
    #[error("cannot read the scw config file {}: {source}", .path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the scw config file {} is invalid: {detail}", .path.display())]
    Invalid { path: PathBuf, detail: String },
    #[error("profile {name:?} named by {by} is not in {place}")]
    UnknownProfile {
        name: String,
        by: &'static str,
        /// The file and what it holds instead.
        place: String,
    },
    #[error("no Scaleway {what}: pass {flag}, set {var}, or set {key} in {place}")]
    Missing {
        what: &'static str,
        flag: &'static str,
        var: &'static str,
        key: &'static str,
        place: String,
    },
    #[error("the Scaleway {what} from {from} is empty")]
    Empty { what: &'static str, from: String },
    #[error("the default zone {zone:?} from {from} is not a zone (expected e.g. fr-par-2)")]
    Zone { zone: String, from: String },
}

/// The five settings of one layer. No Debug: it may hold the secret key.
#[derive(Clone, Default)]
struct Values([Option<String>; 5]);

impl Values {
    fn get(&self, field: Field) -> Option<&str> {
        self.0[field.index()].as_deref()
    }

    fn set(&mut self, field: Field, value: String) {
        self.0[field.index()] = Some(value);
    }
}

/// Where the config file is looked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigPath {
    pub path: PathBuf,
    /// Named by `SCW_CONFIG_PATH`: no `config.yml` fallback.
    pub explicit: bool,
}

/// `GetConfigPath`: `None` when neither variable nor a home is set.
pub fn config_path(env: &Env) -> Option<ConfigPath> {
    if let Some(path) = env.non_empty(CONFIG_PATH_VAR) {
        return Some(ConfigPath {
            path: PathBuf::from(path),
            explicit: true,
        });
    }
    let dir = match env.non_empty(XDG_CONFIG_HOME_VAR) {
        Some(xdg) => Path::new(xdg).join("scw"),
        None => Path::new(env.non_empty(HOME_VAR)?).join(".config/scw"),
    };
    Some(ConfigPath {
        path: dir.join("config.yaml"),
        explicit: false,
    })
}

/// A config file that was found and parsed.
struct ConfigFile {
    path: PathBuf,
    /// The top-level keys.
    default: Values,
    active_profile: Option<String>,
    profiles: BTreeMap<String, Values>,
}

/// Reads the file at `at` (or its `config.yml` twin); `Ok(None)` when absent.
fn load(at: &ConfigPath, notes: &mut Vec<String>) -> Result<Option<ConfigFile>, ProfileError> {
    if let Some(file) = read(&at.path, notes)? {
        return Ok(Some(file));
    }
    if at.explicit || at.path.extension().is_none_or(|e| e != "yaml") {
        return Ok(None);
    }
    read(&at.path.with_extension("yml"), notes)
}

fn read(path: &Path, notes: &mut Vec<String>) -> Result<Option<ConfigFile>, ProfileError> {
    let read_error = |source| ProfileError::Read {
        path: path.to_path_buf(),
        source,
    };
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(read_error(e)),
    };
    let mode = meta.permissions().mode() & 0o777;
    if mode != 0o600 {
        notes.push(format!(
            "the scw config file {} has mode {mode:04o}, not 0600; others may read its secret keys: chmod 0600 {}",
            path.display(),
            path.display()
        ));
    }
    let bytes = std::fs::read(path).map_err(read_error)?;
    parse(path, &bytes).map(Some)
}

/// Parses a config file. Messages name keys and places, never a value:
/// the file holds secret keys.
fn parse(path: &Path, bytes: &[u8]) -> Result<ConfigFile, ProfileError> {
    let invalid = |detail: String| ProfileError::Invalid {
        path: path.to_path_buf(),
        detail,
    };
    // The YAML library's own messages (syntax errors with a line and
    // column, duplicate keys) quote no value.
    let mut doc: Value =
        serde_yaml_ng::from_slice(bytes).map_err(|e| invalid(format!("not YAML: {e}")))?;
    doc.apply_merge().map_err(|e| invalid(e.to_string()))?;
    let empty = Mapping::new();
    let top = match &doc {
        Value::Null => &empty,
        Value::Mapping(m) => m,
        _ => return Err(invalid("the document is not a mapping of keys".into())),
    };
    let default = values(top).map_err(|key| invalid(format!("{key} is not a string")))?;
    let active_profile = scalar(top.get("active_profile"))
        .map_err(|()| invalid("active_profile is not a string".into()))?;
    let mut profiles = BTreeMap::new();
    match top.get("profiles") {
        None | Some(Value::Null) => {}
        Some(Value::Mapping(named)) => {
            for (name, profile) in named {
                let name = scalar(Some(name)).ok().flatten().ok_or_else(|| {
                    invalid("a profile name under profiles is not a string".into())
                })?;
                let profile = match profile {
                    Value::Null => Values::default(),
                    Value::Mapping(m) => values(m).map_err(|key| {
                        invalid(format!("{key} of profile {name:?} is not a string"))
                    })?,
                    _ => return Err(invalid(format!("profile {name:?} is not a mapping"))),
                };
                profiles.insert(name, profile);
            }
        }
        Some(_) => return Err(invalid("profiles is not a mapping".into())),
    }
    Ok(ConfigFile {
        path: path.to_path_buf(),
        default,
        active_profile,
        profiles,
    })
}

/// The five settings of a profile's mapping; `Err(key)` for a key whose
/// value is not a scalar.
fn values(profile: &Mapping) -> Result<Values, &'static str> {
    let mut out = Values::default();
    for field in Field::ALL {
        if let Some(v) = scalar(profile.get(field.key())).map_err(|()| field.key())? {
            out.set(field, v);
        }
    }
    Ok(out)
}

/// A scalar as the Go SDK's YAML decoder fills a string: a number or a
/// boolean is taken as its text; null is unset.
fn scalar(value: Option<&Value>) -> Result<Option<String>, ()> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Number(n)) => Ok(Some(n.to_string())),
        Some(Value::Bool(b)) => Ok(Some(b.to_string())),
        Some(_) => Err(()),
    }
}

/// Where a value came from, for messages.
#[derive(Clone, Copy)]
enum Origin<'a> {
    Flag,
    Var(&'static str),
    /// A key of the file; `profile` is `None` for the top level.
    Key {
        path: &'a Path,
        profile: Option<&'a str>,
    },
}

impl Origin<'_> {
    fn describe(self, field: Field) -> String {
        match self {
            Origin::Flag => field.flag().to_string(),
            Origin::Var(var) => var.to_string(),
            Origin::Key {
                path,
                profile: None,
            } => format!("{} in {}", field.key(), path.display()),
            Origin::Key {
                path,
                profile: Some(name),
            } => format!("{} of profile {name:?} in {}", field.key(), path.display()),
        }
    }
}

/// One layer of the precedence, highest first in [`resolve`]. A layer
/// read from the environment knows, per field, which variable it used.
struct Layer<'a> {
    values: Values,
    origin: Origin<'a>,
    vars: [Option<&'static str>; 5],
}

impl Layer<'_> {
    fn origin(&self, field: Field) -> Origin<'_> {
        match self.vars[field.index()] {
            Some(var) => Origin::Var(var),
            None => self.origin,
        }
    }
}

/// The environment layer: per field, the first of its variables that is set.
fn env_layer(env: &Env, notes: &mut Vec<String>) -> Layer<'static> {
    let mut layer = Layer {
        values: Values::default(),
        // Never used: every value of this layer has its variable in `vars`.
        origin: Origin::Flag,
        vars: [None; 5],
    };
    for field in Field::ALL {
        let vars = field.vars();
        if let Some((at, var, value)) = vars
            .iter()
            .enumerate()
            .find_map(|(at, var)| env.get(var).map(|v| (at, *var, v)))
        {
            if at > 0 {
                notes.push(format!("{var} is deprecated: use {}", vars[0]));
            }
            layer.values.set(field, value.to_string());
            layer.vars[field.index()] = Some(var);
        }
    }
    layer
}

/// The profile named by `SCW_PROFILE`, else by the file's
/// `active_profile`, with what named it; `None`: the top level alone.
fn selected<'f>(env: &'f Env, file: Option<&'f ConfigFile>) -> Option<(&'f str, &'static str)> {
    if let Some(name) = env.non_empty(PROFILE_VAR) {
        return Some((name, PROFILE_VAR));
    }
    file.and_then(|f| f.active_profile.as_deref())
        .map(|name| (name, "active_profile"))
}

/// Merges flags, environment and the scw config file as the scw tools do.
pub fn resolve(given: &Given, env: &Env) -> Result<Resolved, ProfileError> {
    let mut notes = Vec::new();
    let at = config_path(env);
    let file = match &at {
        Some(at) => load(at, &mut notes)?,
        None => None,
    };
    // The file as messages name it: the one read, else the one looked for.
    let place = match (&file, &at) {
        (Some(f), _) => f.path.display().to_string(),
        (None, Some(at)) => format!("{} (no such file)", at.path.display()),
        (None, None) => format!(
            "a scw config file (set {CONFIG_PATH_VAR}, {XDG_CONFIG_HOME_VAR} or {HOME_VAR})"
        ),
    };
    let from_file = file_layers(env, file.as_ref(), &place)?;
    // Highest first: flags, variables, the named profile, the top level.
    let mut layers = vec![flag_layer(given), env_layer(env, &mut notes)];
    layers.extend(from_file.layers);
    let merged = Merged {
        layers,
        missing_place: from_file.missing_place,
    };

    let secret_key = SecretKey::new(merged.required(Field::SecretKey)?);
    let project_id = merged.required(Field::ProjectId)?;
    let default_zone = match merged.pick(Field::DefaultZone) {
        Some((zone, from)) => {
            super::parse_zone(&zone).map_err(|_| ProfileError::Zone { zone, from })?
        }
        None => DEFAULT_ZONE.to_string(),
    };
    // The SDK reads SCALEWAY_ACCESS_KEY as both keys (old Terraform kept
    // the secret there): an access key that is the secret is not kept,
    // since the access key is logged.
    let access_key = merged
        .pick(Field::AccessKey)
        .map(|(v, _)| v)
        .filter(|a| a != secret_key.expose());
    let api_url = merged
        .pick(Field::ApiUrl)
        .map_or_else(|| DEFAULT_API_URL.to_string(), |(v, _)| v);
    Ok(Resolved {
        access_key,
        secret_key,
        project_id,
        api_url,
        default_zone,
        profile: from_file.profile,
        notes,
    })
}

fn flag_layer(given: &Given) -> Layer<'static> {
    let mut values = Values::default();
    let given_values = [
        given.access_key.clone(),
        given.secret_key.as_ref().map(|k| k.expose().to_string()),
        given.project_id.clone(),
        given.api_url.clone(),
        given.default_zone.clone(),
    ];
    for (field, value) in Field::ALL.into_iter().zip(given_values) {
        if let Some(v) = value {
            values.set(field, v);
        }
    }
    Layer {
        values,
        origin: Origin::Flag,
        vars: [None; 5],
    }
}

/// What the config file contributes.
struct FileLayers<'f> {
    /// The named profile, then the top level.
    layers: Vec<Layer<'f>>,
    /// The profile read, for the logs.
    profile: Option<String>,
    /// Where a missing setting could be added.
    missing_place: String,
}

/// The selected profile (`GetActiveProfile`) as layers: a named profile
/// over the top level, or the top level alone.
fn file_layers<'f>(
    env: &'f Env,
    file: Option<&'f ConfigFile>,
    place: &str,
) -> Result<FileLayers<'f>, ProfileError> {
    let mut out = FileLayers {
        layers: Vec::new(),
        profile: None,
        missing_place: place.to_string(),
    };
    match selected(env, file) {
        Some(("", by)) => {
            // Only `active_profile` can name "": an empty SCW_PROFILE is unset.
            return Err(ProfileError::Invalid {
                path: file.map(|f| f.path.clone()).unwrap_or_default(),
                detail: format!("{by} is empty"),
            });
        }
        Some((name, by)) if name != DEFAULT_PROFILE => {
            let Some((f, named)) = file.and_then(|f| f.profiles.get(name).map(|p| (f, p))) else {
                let place = match file {
                    Some(f) => {
                        let known: Vec<&str> = f.profiles.keys().map(String::as_str).collect();
                        format!("{place} (its profiles: {})", list_or_none(&known))
                    }
                    None => place.to_string(),
                };
                return Err(ProfileError::UnknownProfile {
                    name: name.to_string(),
                    by,
                    place,
                });
            };
            out.layers.push(Layer {
                values: named.clone(),
                origin: Origin::Key {
                    path: &f.path,
                    profile: Some(name),
                },
                vars: [None; 5],
            });
            out.profile = Some(format!("profile {name:?} in {}", f.path.display()));
            out.missing_place = format!("profile {name:?} of {place}");
        }
        _ => {}
    }
    if let Some(f) = file {
        out.layers.push(Layer {
            values: f.default.clone(),
            origin: Origin::Key {
                path: &f.path,
                profile: None,
            },
            vars: [None; 5],
        });
        out.profile
            .get_or_insert_with(|| format!("the default profile in {}", f.path.display()));
    }
    Ok(out)
}

/// The layers, highest first.
struct Merged<'a> {
    layers: Vec<Layer<'a>>,
    missing_place: String,
}

impl Merged<'_> {
    /// The value of the highest layer that sets `field`, and its origin.
    fn pick(&self, field: Field) -> Option<(String, String)> {
        self.layers.iter().find_map(|layer| {
            layer
                .values
                .get(field)
                .map(|v| (v.to_string(), layer.origin(field).describe(field)))
        })
    }

    /// A setting that must be given and not empty.
    fn required(&self, field: Field) -> Result<String, ProfileError> {
        let Some((value, from)) = self.pick(field) else {
            return Err(ProfileError::Missing {
                what: field.what(),
                flag: field.flag(),
                var: field.vars()[0],
                key: field.key(),
                place: self.missing_place.clone(),
            });
        };
        if value.is_empty() {
            return Err(ProfileError::Empty {
                what: field.what(),
                from,
            });
        }
        Ok(value)
    }
}

fn list_or_none(names: &[&str]) -> String {
    if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    }
}

#[cfg(test)]
#[path = "profile_tests.rs"]
mod tests;
