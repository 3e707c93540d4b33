//! The scw configuration precedence, each test with its own directory and
//! its own environment map (no process environment, no real HOME).

use std::os::unix::fs::PermissionsExt as _;
use std::sync::atomic::{AtomicU32, Ordering};

use super::*;

/// A fresh directory, removed when dropped.
struct Dir(PathBuf);

impl Dir {
    fn new() -> Dir {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let path = std::env::temp_dir().join(format!(
            "kps-scw-profile-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&path).unwrap();
        Dir(path)
    }

    /// Writes `text` at `relative` with mode 0600, as `scw init` does.
    fn file(&self, relative: &str, text: &str) -> PathBuf {
        let path = self.0.join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        path
    }

    /// `$HOME/.config/scw/config.yaml` under this directory as HOME.
    fn home_config(&self, text: &str) -> PathBuf {
        self.file(".config/scw/config.yaml", text)
    }

    fn home(&self) -> (&'static str, String) {
        ("HOME", self.0.display().to_string())
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn env<const N: usize>(pairs: [(&str, String); N]) -> Env {
    pairs.into_iter().collect()
}

fn secret(s: &str) -> SecretKey {
    SecretKey::new(s)
}

const DEFAULT_ONLY: &str = "\
# Scaleway configuration file
access_key: SCWDEFAULTACCESSKEY0
secret_key: default-secret
default_organization_id: 11111111-1111-1111-1111-111111111111
default_project_id: default-project
default_region: nl-ams
default_zone: nl-ams-1
insecure: false
send_telemetry: true
";

const WITH_PROFILES: &str = "\
secret_key: default-secret
default_project_id: default-project
default_zone: nl-ams-1
api_url: https://default.example
active_profile: prod
profiles:
  prod:
    secret_key: prod-secret
    default_zone: fr-par-1
  dev:
    default_project_id: dev-project
  default:
    secret_key: never-read
";

#[test]
fn the_default_profile_alone() {
    let dir = Dir::new();
    let path = dir.home_config(DEFAULT_ONLY);
    let r = resolve(&Given::default(), &env([dir.home()])).unwrap();
    assert_eq!(r.access_key.as_deref(), Some("SCWDEFAULTACCESSKEY0"));
    assert_eq!(r.secret_key, secret("default-secret"));
    assert_eq!(r.project_id, "default-project");
    assert_eq!(r.default_zone, "nl-ams-1");
    assert_eq!(r.api_url, DEFAULT_API_URL);
    assert_eq!(
        r.profile,
        Some(format!("the default profile in {}", path.display()))
    );
    assert!(r.notes.is_empty(), "{:?}", r.notes);
}

#[test]
fn active_profile_is_merged_over_the_default_profile() {
    let dir = Dir::new();
    let path = dir.home_config(WITH_PROFILES);
    let r = resolve(&Given::default(), &env([dir.home()])).unwrap();
    // Set by prod.
    assert_eq!(r.secret_key, secret("prod-secret"));
    assert_eq!(r.default_zone, "fr-par-1");
    // Not set by prod: the top level's.
    assert_eq!(r.project_id, "default-project");
    assert_eq!(r.api_url, "https://default.example");
    assert_eq!(
        r.profile,
        Some(format!("profile \"prod\" in {}", path.display()))
    );
}

#[test]
fn scw_profile_overrides_active_profile() {
    let dir = Dir::new();
    dir.home_config(WITH_PROFILES);
    let r = resolve(
        &Given::default(),
        &env([dir.home(), ("SCW_PROFILE", "dev".into())]),
    )
    .unwrap();
    assert_eq!(r.project_id, "dev-project");
    assert_eq!(r.secret_key, secret("default-secret"), "not prod's");
    assert_eq!(r.default_zone, "nl-ams-1");

    // `default` names the top level, not a profile of that name.
    let r = resolve(
        &Given::default(),
        &env([dir.home(), ("SCW_PROFILE", "default".into())]),
    )
    .unwrap();
    assert_eq!(r.secret_key, secret("default-secret"));
    assert_eq!(r.default_zone, "nl-ams-1");

    // An empty SCW_PROFILE is unset: active_profile applies.
    let r = resolve(
        &Given::default(),
        &env([dir.home(), ("SCW_PROFILE", String::new())]),
    )
    .unwrap();
    assert_eq!(r.secret_key, secret("prod-secret"));
}

#[test]
fn variables_override_the_profile_field_by_field() {
    let dir = Dir::new();
    dir.home_config(WITH_PROFILES);
    let r = resolve(
        &Given::default(),
        &env([
            dir.home(),
            ("SCW_SECRET_KEY", "env-secret".into()),
            ("SCW_DEFAULT_ZONE", "pl-waw-2".into()),
        ]),
    )
    .unwrap();
    assert_eq!(r.secret_key, secret("env-secret"));
    assert_eq!(r.default_zone, "pl-waw-2");
    assert_eq!(r.project_id, "default-project");
    assert_eq!(r.api_url, "https://default.example");

    // Set but empty still wins (`os.LookupEnv`), and is then refused.
    let err = resolve(
        &Given::default(),
        &env([dir.home(), ("SCW_DEFAULT_PROJECT_ID", String::new())]),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "the Scaleway project id from SCW_DEFAULT_PROJECT_ID is empty"
    );
}

#[test]
fn flags_win_over_variables_and_the_file() {
    let dir = Dir::new();
    dir.home_config(WITH_PROFILES);
    let given = Given {
        secret_key: Some(secret("flag-secret")),
        default_zone: Some("fr-par-3".into()),
        api_url: Some("http://127.0.0.1:1".into()),
        ..Given::default()
    };
    let r = resolve(
        &given,
        &env([
            dir.home(),
            ("SCW_SECRET_KEY", "env-secret".into()),
            ("SCW_DEFAULT_ZONE", "pl-waw-2".into()),
            ("SCW_DEFAULT_PROJECT_ID", "env-project".into()),
        ]),
    )
    .unwrap();
    assert_eq!(r.secret_key, secret("flag-secret"));
    assert_eq!(r.default_zone, "fr-par-3");
    assert_eq!(r.api_url, "http://127.0.0.1:1");
    assert_eq!(r.project_id, "env-project");
}

#[test]
fn variables_alone_work_as_before() {
    let dir = Dir::new(); // an empty HOME
    let r = resolve(
        &Given::default(),
        &env([
            dir.home(),
            ("SCW_ACCESS_KEY", "SCWXXXXXXXXXXXXXXXXX".into()),
            ("SCW_SECRET_KEY", "env-secret".into()),
            ("SCW_DEFAULT_PROJECT_ID", "env-project".into()),
        ]),
    )
    .unwrap();
    assert_eq!(r.secret_key, secret("env-secret"));
    assert_eq!(r.access_key.as_deref(), Some("SCWXXXXXXXXXXXXXXXXX"));
    assert_eq!(r.project_id, "env-project");
    assert_eq!(r.api_url, DEFAULT_API_URL);
    assert_eq!(r.default_zone, DEFAULT_ZONE);
    assert_eq!(r.profile, None);

    // No file, no secret: the message says every place it may come from.
    let err = resolve(
        &Given::default(),
        &env([dir.home(), ("SCW_DEFAULT_PROJECT_ID", "p".into())]),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "no Scaleway secret key: pass --scw-secret-key, set SCW_SECRET_KEY, or set secret_key in {}/.config/scw/config.yaml (no such file)",
            dir.0.display()
        )
    );
}

#[test]
fn where_the_file_is_looked_for() {
    let path = |pairs: &[(&str, &str)]| {
        config_path(&pairs.iter().copied().collect()).map(|c| (c.path, c.explicit))
    };
    let all = [
        ("SCW_CONFIG_PATH", "/etc/scw.yaml"),
        ("XDG_CONFIG_HOME", "/xdg"),
        ("HOME", "/home/op"),
    ];
    assert_eq!(path(&all), Some(("/etc/scw.yaml".into(), true)));
    assert_eq!(
        path(&all[1..]),
        Some(("/xdg/scw/config.yaml".into(), false))
    );
    assert_eq!(
        path(&all[2..]),
        Some(("/home/op/.config/scw/config.yaml".into(), false))
    );
    // Empty variables count as unset.
    assert_eq!(
        path(&[
            ("SCW_CONFIG_PATH", ""),
            ("XDG_CONFIG_HOME", ""),
            ("HOME", "/h")
        ]),
        Some(("/h/.config/scw/config.yaml".into(), false))
    );
    assert_eq!(path(&[("HOME", "")]), None);
    assert_eq!(path(&[]), None);
}

#[test]
fn scw_config_path_and_xdg_config_home_are_read() {
    let dir = Dir::new();
    dir.home_config("secret_key: home-secret\ndefault_project_id: p\n");
    let xdg = dir.file(
        "xdg/scw/config.yaml",
        "secret_key: xdg-secret\ndefault_project_id: p\n",
    );
    let custom = dir.file(
        "custom.yaml",
        "secret_key: custom-secret\ndefault_project_id: p\n",
    );
    let xdg_dir = || ("XDG_CONFIG_HOME", dir.0.join("xdg").display().to_string());

    let r = resolve(&Given::default(), &env([dir.home(), xdg_dir()])).unwrap();
    assert_eq!(r.secret_key, secret("xdg-secret"));
    assert!(r.profile.unwrap().ends_with(&*xdg.display().to_string()));

    let r = resolve(
        &Given::default(),
        &env([
            dir.home(),
            xdg_dir(),
            ("SCW_CONFIG_PATH", custom.display().to_string()),
        ]),
    )
    .unwrap();
    assert_eq!(r.secret_key, secret("custom-secret"));
}

#[test]
fn config_yml_is_read_when_config_yaml_is_missing() {
    let dir = Dir::new();
    dir.file(
        ".config/scw/config.yml",
        "secret_key: yml-secret\ndefault_project_id: p\n",
    );
    let r = resolve(&Given::default(), &env([dir.home()])).unwrap();
    assert_eq!(r.secret_key, secret("yml-secret"));

    // Not for a path named by SCW_CONFIG_PATH.
    let named = dir.0.join("other.yaml");
    dir.file(
        "other.yml",
        "secret_key: yml-secret\ndefault_project_id: p\n",
    );
    let r = resolve(
        &Given::default(),
        &env([
            ("SCW_CONFIG_PATH", named.display().to_string()),
            ("SCW_SECRET_KEY", "env-secret".into()),
            ("SCW_DEFAULT_PROJECT_ID", "p".into()),
        ]),
    )
    .unwrap();
    assert_eq!(r.secret_key, secret("env-secret"));
    assert_eq!(r.profile, None);
}

#[test]
fn invalid_yaml_is_a_clear_error_without_the_secret() {
    let dir = Dir::new();
    let path = dir.home_config("secret_key: 'Sekr1t-value\nprofiles: [\n");
    let err = resolve(&Given::default(), &env([dir.home()])).unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with(&format!(
            "the scw config file {} is invalid: not YAML: ",
            path.display()
        )),
        "{text}"
    );
    assert!(text.contains("line"), "{text}");
    assert!(!text.contains("Sekr1t") && !format!("{err:?}").contains("Sekr1t"));

    for (yaml, detail) in [
        ("- a list\n", "the document is not a mapping of keys"),
        ("profiles: [prod]\n", "profiles is not a mapping"),
        (
            "profiles:\n  prod: Sekr1t\n",
            "profile \"prod\" is not a mapping",
        ),
        ("secret_key: [Sekr1t]\n", "secret_key is not a string"),
        (
            "profiles:\n  prod:\n    secret_key: {k: Sekr1t}\n",
            "secret_key of profile \"prod\" is not a string",
        ),
    ] {
        dir.home_config(yaml);
        let err = resolve(&Given::default(), &env([dir.home()])).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "the scw config file {} is invalid: {detail}",
                path.display()
            ),
            "{yaml}"
        );
        assert!(!format!("{err} {err:?}").contains("Sekr1t"), "{yaml}");
    }
}

#[test]
fn a_file_that_cannot_be_read_is_an_error() {
    let dir = Dir::new();
    std::fs::create_dir_all(dir.0.join(".config/scw/config.yaml")).unwrap();
    let err = resolve(
        &Given::default(),
        &env([
            dir.home(),
            ("SCW_SECRET_KEY", "s".into()),
            ("SCW_DEFAULT_PROJECT_ID", "p".into()),
        ]),
    )
    .unwrap_err();
    assert!(
        matches!(&err, ProfileError::Read { path, .. } if path.ends_with(".config/scw/config.yaml")),
        "{err}"
    );
}

#[test]
fn an_unknown_profile_is_a_clear_error() {
    let dir = Dir::new();
    let path = dir.home_config(WITH_PROFILES);
    let err = resolve(
        &Given::default(),
        &env([dir.home(), ("SCW_PROFILE", "staging".into())]),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "profile \"staging\" named by SCW_PROFILE is not in {} (its profiles: default, dev, prod)",
            path.display()
        )
    );

    dir.home_config("active_profile: prod\nsecret_key: s\n");
    let err = resolve(&Given::default(), &env([dir.home()])).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "profile \"prod\" named by active_profile is not in {} (its profiles: none)",
            path.display()
        )
    );

    dir.home_config("active_profile: ''\nsecret_key: s\n");
    let err = resolve(&Given::default(), &env([dir.home()])).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "the scw config file {} is invalid: active_profile is empty",
            path.display()
        )
    );

    // With no file at all, as Terraform's provider does.
    let empty = Dir::new();
    let err = resolve(
        &Given::default(),
        &env([
            empty.home(),
            ("SCW_PROFILE", "prod".into()),
            ("SCW_SECRET_KEY", "s".into()),
            ("SCW_DEFAULT_PROJECT_ID", "p".into()),
        ]),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "profile \"prod\" named by SCW_PROFILE is not in {}/.config/scw/config.yaml (no such file)",
            empty.0.display()
        )
    );
}

#[test]
fn deprecated_variables_are_read_with_a_warning() {
    let dir = Dir::new();
    let r = resolve(
        &Given::default(),
        &env([
            dir.home(),
            ("SCW_TOKEN", "cli-secret".into()),
            ("SCALEWAY_TOKEN", "terraform-secret".into()),
            ("SCW_DEFAULT_PROJECT_ID", "p".into()),
        ]),
    )
    .unwrap();
    assert_eq!(r.secret_key, secret("cli-secret"));
    assert_eq!(r.notes, ["SCW_TOKEN is deprecated: use SCW_SECRET_KEY"]);

    let r = resolve(
        &Given::default(),
        &env([
            dir.home(),
            ("SCW_SECRET_KEY", "current".into()),
            ("SCW_TOKEN", "cli-secret".into()),
            ("SCW_DEFAULT_PROJECT_ID", "p".into()),
        ]),
    )
    .unwrap();
    assert_eq!(r.secret_key, secret("current"));
    assert!(r.notes.is_empty());
}

#[test]
fn a_file_others_may_read_is_warned_about() {
    let dir = Dir::new();
    let path = dir.home_config(DEFAULT_ONLY);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let r = resolve(&Given::default(), &env([dir.home()])).unwrap();
    assert_eq!(r.notes.len(), 1, "{:?}", r.notes);
    assert!(r.notes[0].contains("mode 0644"), "{:?}", r.notes);
    assert!(r.notes[0].contains(&format!("chmod 0600 {}", path.display())));
}

#[test]
fn an_invalid_zone_names_where_it_came_from() {
    let dir = Dir::new();
    let path = dir.home_config(WITH_PROFILES.replace("fr-par-1", "paris").as_str());
    let err = resolve(&Given::default(), &env([dir.home()])).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "the default zone \"paris\" from default_zone of profile \"prod\" in {} is not a zone (expected e.g. fr-par-2)",
            path.display()
        )
    );
    let err = resolve(
        &Given::default(),
        &env([dir.home(), ("SCW_DEFAULT_ZONE", "fr-par".into())]),
    )
    .unwrap_err();
    assert!(err.to_string().contains("from SCW_DEFAULT_ZONE"), "{err}");
}

#[test]
fn yaml_merge_keys_and_empty_profiles_are_accepted() {
    let dir = Dir::new();
    dir.home_config(
        "\
base: &base
  secret_key: merged-secret
  default_project_id: merged-project
active_profile: prod
profiles:
  prod:
    <<: *base
    default_zone: nl-ams-2
  empty:
",
    );
    let r = resolve(&Given::default(), &env([dir.home()])).unwrap();
    assert_eq!(r.secret_key, secret("merged-secret"));
    assert_eq!(r.project_id, "merged-project");
    assert_eq!(r.default_zone, "nl-ams-2");
    // A profile with no keys is the top level (empty here, hence no key).
    let err = resolve(
        &Given::default(),
        &env([dir.home(), ("SCW_PROFILE", "empty".into())]),
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            ProfileError::Missing {
                what: "secret key",
                ..
            }
        ),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("or set secret_key in profile \"empty\" of "),
        "{err}"
    );
}

#[test]
fn secrets_never_appear_in_debug_output() {
    let dir = Dir::new();
    dir.home_config(
        "secret_key: Sekr1t-file\ndefault_project_id: p\nactive_profile: x\nprofiles:\n  x: {}\n",
    );
    let e = env([dir.home(), ("SCALEWAY_ACCESS_KEY", "Sekr1t-legacy".into())]);
    let r = resolve(&Given::default(), &e).unwrap();
    assert_eq!(r.secret_key, secret("Sekr1t-legacy"));
    // Old Terraform set the secret in SCALEWAY_ACCESS_KEY, which the SDK
    // reads as both keys: the access key is logged, so it is dropped.
    assert_eq!(r.access_key, None);
    let given = Given {
        secret_key: Some(secret("Sekr1t-flag")),
        ..Given::default()
    };
    let shown = format!("{r:?} {e:?} {given:?}");
    assert!(!shown.contains("Sekr1t"), "{shown}");
    assert!(
        shown.contains("SCALEWAY_ACCESS_KEY"),
        "the names are shown: {shown}"
    );
}
