use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::*;
use crate::machine_config::tests::WORKER;

/// The `talos-config` binary, built (or found up to date) by
/// talos-sim/conformance/build.sh, which needs Go: never skipped.
pub(crate) fn talos_config() -> ConfigValidator {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    let bin = BIN.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("conformance/build.sh");
        let out = std::process::Command::new(&script)
            .output()
            .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
        assert!(
            out.status.success(),
            "{} failed: {}",
            script.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8(out.stdout).expect("UTF-8 path");
        PathBuf::from(stdout.lines().last().expect("build.sh prints the path"))
    });
    ConfigValidator::new(bin).expect("talos-config is executable")
}

/// The worker fixture with the v1alpha1 stable hostname next to its
/// HostnameConfig document: what every e2e config looked like before the
/// renderer reconciled the two, and what Talos refuses.
pub(crate) fn stable_hostname_conflict() -> String {
    let config = WORKER.replacen(
        "  type: worker\n",
        "  type: worker\n  features:\n    stableHostname: true\n",
        1,
    );
    assert_ne!(config, WORKER, "the fixture changed");
    config
}

pub(crate) const CONFLICT_MESSAGE: &str =
    "1 error occurred:\n\t* stable hostname is already set in v1alpha1 config\n\n";

#[tokio::test]
async fn talos_machinery_judges_the_configs() {
    let validator = talos_config();
    assert_eq!(
        validator.check(WORKER.as_bytes()).await.unwrap(),
        Verdict::Valid { warnings: vec![] }
    );
    assert_eq!(
        validator
            .check(stable_hostname_conflict().as_bytes())
            .await
            .unwrap(),
        Verdict::Invalid(CONFLICT_MESSAGE.to_string())
    );
    match validator.check(b"machine: [unclosed\n").await.unwrap() {
        Verdict::Unparsable(message) => assert!(!message.is_empty()),
        other => panic!("expected unparsable, got {other:?}"),
    }
}

#[test]
fn a_missing_or_non_executable_validator_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    assert!(ConfigValidator::new(dir.path().join("nope")).is_err());
    let file = dir.path().join("plain");
    std::fs::write(&file, "#!/bin/sh\n").unwrap();
    let err = ConfigValidator::new(&file).unwrap_err();
    assert!(err.to_string().contains("not an executable file"), "{err}");
}

#[tokio::test]
async fn a_crashing_validator_is_an_error_not_a_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("validator");
    std::fs::write(&script, "#!/bin/sh\necho boom >&2\nexit 7\n").unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let validator = ConfigValidator::new(&script).unwrap();
    // Whether the validator dies before or after the config is written (a
    // config larger than a pipe holds always finds it gone), its exit status
    // and stderr are the answer.
    for config in [b"x".to_vec(), vec![b'#'; 1 << 20]] {
        let err = validator.check(&config).await.unwrap_err();
        assert!(err.to_string().contains("boom"), "{err}");
    }
}

/// A validator that answers "valid" without reading the config judged
/// nothing: an error, never a verdict. The config is larger than a pipe
/// holds, so the write fails whatever the timing.
#[tokio::test]
async fn a_validator_that_does_not_read_the_config_gives_no_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("validator");
    std::fs::write(&script, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let err = ConfigValidator::new(&script)
        .unwrap()
        .check(&vec![b'#'; 1 << 20])
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("without reading the whole config"),
        "{err}"
    );
}
