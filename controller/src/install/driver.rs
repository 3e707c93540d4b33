//! Runs one install through the ports.

use super::{InstallEngine, InstallSpec};

pub(super) async fn run(engine: InstallEngine, spec: InstallSpec) {
    let _ = (engine, spec);
}
