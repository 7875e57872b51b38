//! The deployment mode (DESIGN §8): the packaged system service, or a user's own. Both the
//! store (which root) and the bus choice (which bus `auto` means) follow it, so it sits
//! below both rather than in either.

/// The environment variable the packaged *system* units set (`AGENTSTORE_MODE=system`).
pub const MODE_ENV: &str = "AGENTSTORE_MODE";

/// True when running as the packaged system service (`AGENTSTORE_MODE=system`).
pub fn system_mode() -> bool {
    std::env::var(MODE_ENV).is_ok_and(|v| v.trim().eq_ignore_ascii_case("system"))
}
