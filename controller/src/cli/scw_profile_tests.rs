//! The scw config file through a command's real entry point: `catalog`
//! parsed by clap and run with a given environment, against wiremock
//! standing for the API the profile names.

use std::os::unix::fs::PermissionsExt as _;

use clap::Parser as _;
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use super::catalog::{CatalogArgs, run_in};
use crate::config::profile::Env;

#[derive(clap::Parser)]
struct Cli {
    #[command(flatten)]
    args: CatalogArgs,
}

/// Answers the offer listings of `zone` (hourly and monthly) only to `token`.
async fn offers_for(server: &MockServer, zone: &str, token: &str) {
    Mock::given(method("GET"))
        .and(path(format!("/baremetal/v1/zones/{zone}/offers")))
        .and(header("X-Auth-Token", token))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(serde_json::json!({"offers": [], "total_count": 0})),
        )
        .expect(2)
        .mount(server)
        .await;
}

#[tokio::test]
async fn catalog_reads_the_active_profile_and_flags_still_win() {
    let server = MockServer::start().await;
    let dir = std::env::temp_dir().join(format!("kps-scw-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "secret_key: default-secret\n\
             default_project_id: p\n\
             active_profile: test\n\
             profiles:\n  test:\n    secret_key: profile-secret\n    api_url: {}\n    default_zone: nl-ams-1\n",
            server.uri()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o600)).unwrap();
    let env: Env = [("SCW_CONFIG_PATH", config.display().to_string())]
        .into_iter()
        .collect();

    // Nothing on the command line: API, key and zone all come from the profile.
    offers_for(&server, "nl-ams-1", "profile-secret").await;
    let args = Cli::try_parse_from(["catalog", "--scw-api-rate-limit", "0"])
        .unwrap()
        .args;
    run_in(args, &env).await.unwrap();

    // A flag wins over the profile.
    offers_for(&server, "nl-ams-1", "flag-secret").await;
    let args = Cli::try_parse_from([
        "catalog",
        "--scw-api-rate-limit",
        "0",
        "--scw-secret-key",
        "flag-secret",
    ])
    .unwrap()
    .args;
    run_in(args, &env).await.unwrap();

    // An unknown profile stops the command before any call.
    let env: Env = [
        ("SCW_CONFIG_PATH", config.display().to_string()),
        ("SCW_PROFILE", "prod".to_string()),
    ]
    .into_iter()
    .collect();
    let args = Cli::try_parse_from(["catalog"]).unwrap().args;
    let err = run_in(args, &env).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "profile \"prod\" named by SCW_PROFILE is not in {} (its profiles: test)",
            config.display()
        )
    );
    let _ = std::fs::remove_dir_all(&dir);
    // `expect(2)` on each mock is verified when the server drops.
}
