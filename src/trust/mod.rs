//! What the machine's administrator allows, and the checks that hold shared input to it
//! (DESIGN §9 "Shared input never chooses authority", issue 27; docs/trust-model.md).
//!
//! The store's contents (from any machine or sync peer) may choose among what this
//! machine's own configuration allows — the account a job runs as ([`account`]), the
//! program it executes ([`programs`]) — never name a new one. That configuration is
//! `/etc/agentstore/config.yaml` for the system services and the user's own
//! `~/.config/agentstore/config.yaml` for a user's daemons ([`policy`]); a root process
//! trusts the file only when root owns it and nobody else can change it ([`secure`]).
//! Each rule has its home here; the queue manager and the worker call it.

pub mod account;
pub mod policy;
pub mod programs;
pub mod secure;
pub mod switch;

pub use account::{Account, AccountError, RunAsRefused, check_run_as};
pub use policy::Policy;
pub use programs::{Program, ProgramRefused, resolve_program};
