//! Every integration test, in ONE test binary (`cargo nextest run --test integration`;
//! one file's tests: `cargo nextest run -E 'test(/^queue_m3::/)'`).
//!
//! One binary, not one per file: 43 test binaries each linked the whole crate and its
//! dependencies (about 50 MB each, 2.3 GB in all), which filled the CI machine's disk and
//! spent minutes linking. Each file below is a module; the shared support is declared here
//! once and taken with `use crate::…` by the files that need it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::new_without_default)]

// Shared support.
mod agentshell_common;
#[path = "support/approvals_env.rs"]
mod approvals_env;
#[path = "support/browser.rs"]
mod browser;
#[path = "support/claude_env.rs"]
mod claude_env;
#[path = "support/codex_env.rs"]
mod codex_env;
mod common;
#[path = "support/daemons.rs"]
mod daemons;
#[path = "support/fake_chat.rs"]
mod fake_chat;
#[path = "support/fake_model.rs"]
mod fake_model;
#[path = "support/fake_notifications.rs"]
mod fake_notifications;
#[path = "support/fake_slack_socket.rs"]
mod fake_slack_socket;
#[path = "support/introspection.rs"]
mod introspection;
#[path = "support/queue_env.rs"]
mod queue_env;
#[path = "support/wait.rs"]
mod wait;
#[path = "support/web_env.rs"]
mod web_env;
// The test harness (compiled once, in `common::bus`), also as `crate::harness`.
use common::bus::harness;

// The tests, one module per file.
mod agentshell_attacks;
mod agentshell_cycle;
mod agentshell_exec;
mod agentshell_layers;
mod agentshell_policy_prop;
mod agentshell_providers;
mod agentshell_sandbox;
mod agentshell_sandbox_git;
mod agentshell_telegram;
mod agentshell_tmux;
mod agentshell_web;
mod approvals_agent;
mod approvals_claude;
mod backlog;
mod bus_flags;
mod claude_real;
mod cli_remote;
mod codex_model;
mod codex_real;
mod codex_rights;
mod conflicts;
mod crash_audit;
mod dbus_introspection;
mod deep_pages;
mod failover;
mod fake_model_script;
mod first_day;
mod flow;
mod fuzz_documents;
mod hostile_fs;
mod hostile_input;
mod layers;
mod m0_cli;
mod machine_identity;
mod machines;
mod message_index;
mod notify;
mod notify_email;
mod notify_slack;
mod notify_slack_jobs;
mod one_home;
mod orchestrator_badinput;
mod orchestrator_m1;
mod orchestrator_m2;
mod package_scripts;
mod permachine;
mod queue_bus;
mod queue_cli;
mod queue_daemon;
mod queue_m3;
mod scale_behaviour;
mod scale_listing;
mod scale_messages;
mod schema_corpus;
mod slurm;
mod slurm_approvals;
mod slurm_relay;
mod systemd_units;
mod tasks_agent_merge;
mod tasks_diskfull;
mod tasks_docs;
mod tasks_e2e;
mod tasks_edit;
mod tasks_integrate;
mod tasks_push;
mod tasks_worktrees;
mod trust;
mod trust_job_signals;
mod trust_readers;
mod trust_signals;
mod units;
mod usermode;
mod web_api;
mod web_conformance;
mod web_dashboard;
mod web_dashboard_tasks;
mod web_limits;
mod web_tasks;
mod web_tcp_limits;
mod worker_agent_real;
mod worker_claude_real;
mod worker_m5;
mod worker_sandbox;
