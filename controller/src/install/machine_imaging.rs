//! The imaging transitions of the machine: the verified write, the re-writes
//! and the image budget.

use tokio::time::Instant;

use super::commands::{self, Written};
use super::events::{phase_event, retry_event};
use super::{Action, FailureClass, Plan, State, Step, command_failed, fail, go, stay};
use crate::install::{InstallEvent, Phase};
use crate::rescue::CommandOutput;

/// The image write returned: check what went by, then sync.
pub(super) fn written(
    plan: &Plan,
    state: &State,
    out: &CommandOutput,
    now: Instant,
    events: &mut Vec<InstallEvent>,
) -> (State, Action) {
    if !out.success() {
        return rewrite(plan, state, now, command_failed("image write", out), events);
    }
    let written = match commands::parse_written(&out.stdout, &out.stderr) {
        Ok(written) => written,
        Err(reason) => {
            return fail(
                state,
                now,
                format!("cannot read the result of the image write: {reason}"),
                FailureClass::Rescue,
            );
        }
    };
    if written.bytes == 0 {
        return rewrite(
            plan,
            state,
            now,
            "the image stream was empty".to_string(),
            events,
        );
    }
    if let Some(expected) = plan.image_sha256.as_deref()
        && written.sha256 != expected
    {
        let next = State {
            checksum_mismatches: state.checksum_mismatches + 1,
            ..state.clone()
        };
        let reason = format!(
            "image {} streamed sha256 {}, but the NodeClass expects {expected}",
            plan.url(),
            written.sha256
        );
        return rewrite(plan, &next, now, reason, events);
    }
    let next = State {
        written: Some(written),
        checksum_mismatches: 0,
        ..stay(state, Step::Sync)
    };
    let command = commands::sync(state.as_root());
    (next, Action::Run { command })
}

/// `sync` returned: read the bytes written back.
pub(super) fn synced(state: &State, out: &CommandOutput, now: Instant) -> (State, Action) {
    if !out.success() {
        return fail(
            state,
            now,
            command_failed("sync", out),
            FailureClass::Rescue,
        );
    }
    let (Some(disk), Some(written)) = (&state.disk, &state.written) else {
        return fail(
            state,
            now,
            "internal error: nothing written to verify".to_string(),
            FailureClass::Internal,
        );
    };
    let command = commands::verify_image(disk, written.bytes, state.as_root());
    (stay(state, Step::Verify), Action::Run { command })
}

/// The read-back returned: boot if the disk holds what was streamed.
pub(super) fn verified(
    plan: &Plan,
    state: &State,
    out: &CommandOutput,
    now: Instant,
    events: &mut Vec<InstallEvent>,
) -> (State, Action) {
    let read_back = if out.success() {
        commands::parse_sha256sum(&out.stdout)
    } else {
        Err(command_failed("reading the image back", out))
    };
    let written = state.written.clone().unwrap_or(Written {
        bytes: 0,
        sha256: String::new(),
    });
    match read_back {
        Ok(hash) if hash == written.sha256 => (
            go(state, Phase::Booting, Step::RebootNormal, now),
            Action::RebootNormal,
        ),
        Ok(hash) => {
            let reason = format!(
                "the {} bytes read back from /dev/{} have sha256 {hash}, not {} as streamed",
                written.bytes,
                state.disk.as_deref().unwrap_or("?"),
                written.sha256
            );
            rewrite(plan, state, now, reason, events)
        }
        Err(reason) => rewrite(plan, state, now, reason, events),
    }
}

/// Starts an image write (a new attempt): the imaging clock restarts, so each
/// write gets the whole imaging deadline.
pub(super) fn start_write(
    plan: &Plan,
    state: &State,
    now: Instant,
    events: &mut Vec<InstallEvent>,
) -> (State, Action) {
    let next = State {
        phase: Phase::Imaging,
        step: Step::WriteImage,
        since: now,
        image_attempts: state.image_attempts + 1,
        written: None,
        ..state.clone()
    };
    let disk = next.disk.clone().unwrap_or_default();
    events.push(phase_event(format!(
        "imaging: writing {} to /dev/{disk} (attempt {}/{})",
        plan.url(),
        next.image_attempts,
        plan.image_attempts
    )));
    let command = commands::write_image(&plan.image_url, plan.compression, &disk, next.as_root());
    (next, Action::Run { command })
}

/// The last write did not land as it should: write again on the same session
/// while the budget lasts.
fn rewrite(
    plan: &Plan,
    state: &State,
    now: Instant,
    reason: String,
    events: &mut Vec<InstallEvent>,
) -> (State, Action) {
    if state.image_attempts >= plan.image_attempts {
        return attempts_exhausted(plan, state, now, &reason, events);
    }
    events.push(retry_event(format!(
        "imaging: {reason}; writing the image again"
    )));
    start_write(plan, state, now, events)
}

/// No image write left in this rescue boot. A fresh rescue boot (within the
/// return-to-rescue budget) gets a new set of writes: what failed may be the
/// rescue system itself (a flaky session, a disk the rescue kernel mishandles)
/// or a controller that restarted during the writes, which interrupts them.
/// The same wrong checksum on every write is a wrong image or a wrong
/// `image.sha256`: another boot cannot help, the install fails.
pub(super) fn attempts_exhausted(
    plan: &Plan,
    state: &State,
    now: Instant,
    last: &str,
    events: &mut Vec<InstallEvent>,
) -> (State, Action) {
    let n = state.image_attempts;
    if plan.image_sha256.is_some() && n > 0 && state.checksum_mismatches == n {
        let reason = format!("{last} (on each of the {n} attempts)");
        return fail(state, now, reason, FailureClass::Image);
    }
    if state.rescue_returns < plan.rescue_returns {
        let next = State {
            rescue_returns: state.rescue_returns + 1,
            image_attempts: 0,
            checksum_mismatches: 0,
            written: None,
            ..go(state, Phase::Ready, Step::RebootRescue, now)
        };
        events.push(retry_event(format!(
            "imaging: {n} image write(s) failed in this rescue boot (last: {last}); rebooting into rescue to write it again (return {}/{})",
            next.rescue_returns, plan.rescue_returns
        )));
        return (next, Action::RebootRescue);
    }
    fail(
        state,
        now,
        format!(
            "the image write failed {n} time(s) in this rescue boot, after {} return(s) to rescue; last: {last}",
            state.rescue_returns
        ),
        FailureClass::ImageAttempts,
    )
}
