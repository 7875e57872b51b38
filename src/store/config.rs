//! `config.yaml` (PRD §2.2, §13.1). Unknown keys are errors that name the key.

use serde::{Deserialize, Serialize};
use std::path::Path;

/// The store's global configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Where the store lives (informational inside the store; used for root resolution in
    /// `/etc/agentstore/config.yaml` and `~/.config/agentstore/config.yaml`).
    #[serde(default)]
    pub agent_store_root: Option<String>,
    /// Queue used when neither the message nor the project names one.
    #[serde(default = "default_queue")]
    pub queues_default: String,
    /// Orchestrator settings.
    #[serde(default)]
    pub orchestrator: OrchestratorConfig,
    /// Reserved for v1.
    #[serde(default)]
    pub slack: SlackConfig,
    /// Logging settings.
    #[serde(default)]
    pub logging: LoggingConfig,
    /// Machine heartbeats and lost machines (extension, issue 13).
    #[serde(default)]
    pub machines: MachinesConfig,
    /// Schema version of the store's documents (extension; absent means 0.5). Written by
    /// `init` and `orchestrator migrate`; a store newer than this build is refused.
    #[serde(default)]
    pub schema_version: Option<String>,
    /// The accounts a root daemon may run jobs as (extension, issue 27; docs/trust-model.md).
    /// Read only from the machine's own configuration (`/etc/agentstore/config.yaml` for the
    /// system services, `~/.config/agentstore/config.yaml` for a user's own daemons), never
    /// from a store's `config.yaml`: the store's contents never choose authority.
    #[serde(default)]
    pub run_as: RunAsPolicy,
    /// The programs a queue may name as `claude_cli_path` / `agentshell_path` (extension,
    /// issue 27). Like `run_as`, read only from the machine's own configuration.
    #[serde(default)]
    pub programs: ProgramsPolicy,
    /// Notifications (extension, issue 31): sinks, their endpoints and secrets, defaults.
    /// Like `run_as`, the notifier reads it only from the machine's own configuration.
    #[serde(default)]
    pub notify: super::notify_config::NotifyConfig,
}

/// `run_as:` section (machine configuration only): which accounts a root queue manager may
/// start a job as. Never uid 0. Without `allowed_users`/`allowed_groups` entries any
/// ordinary account may be chosen: uid within `min_uid..=max_uid` (default: `UID_MIN` and
/// `UID_MAX` of `/etc/login.defs`, else 1000 and 60000) with a login shell listed in
/// `/etc/shells`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RunAsPolicy {
    /// Lowest uid a job may run as (default `UID_MIN` of `/etc/login.defs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_uid: Option<u32>,
    /// Highest uid a job may run as (default `UID_MAX` of `/etc/login.defs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_uid: Option<u32>,
    /// When not empty, the account must be a member of one of these groups.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allowed_groups: Vec<String>,
    /// Accounts allowed whatever their uid range, shell or groups (never root).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allowed_users: Vec<String>,
}

/// `programs:` section (machine configuration only): programs a queue's settings may name,
/// besides the defaults (`claude` and `agentshell` found on the daemon's PATH, and the
/// `agentshell` installed beside the daemons).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct ProgramsPolicy {
    /// Paths (or names looked up on PATH) `claude_cli_path` may name.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub claude: Vec<String>,
    /// Paths (or names looked up on PATH) `agentshell_path` may name.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub agentshell: Vec<String>,
    /// Paths (or names looked up on PATH) `codex_cli_path` may name (issue 35).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub codex: Vec<String>,
}

fn default_queue() -> String {
    "poplar".to_string()
}

impl Default for Config {
    fn default() -> Self {
        Config {
            agent_store_root: None,
            queues_default: default_queue(),
            orchestrator: OrchestratorConfig::default(),
            slack: SlackConfig::default(),
            logging: LoggingConfig::default(),
            machines: MachinesConfig::default(),
            schema_version: None,
            run_as: RunAsPolicy::default(),
            programs: ProgramsPolicy::default(),
            notify: super::notify_config::NotifyConfig::default(),
        }
    }
}

/// `orchestrator:` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OrchestratorConfig {
    /// Backstop sweep interval; the daemon reacts to inotify events in between.
    pub polling_interval_seconds: u64,
    /// Messages handled per loop before finished jobs are looked at.
    pub max_messages_per_loop: usize,
    /// Whether finished jobs update projects and PRDs (PRD §6.5).
    pub enable_job_completion_handler: bool,
    /// Lock file name, relative to the store root.
    pub singleton_lock_file: String,
    /// Seconds without work after which the daemon exits (extension; 0 = never).
    pub idle_exit_seconds: u64,
    /// Hosts whose orchestratord waits as a standby while another machine holds the store
    /// lock, and takes over when the holder goes silent (extension, issue 13; a daemon
    /// started with `--standby` is one too). Elsewhere a held lock is "already running".
    pub standby: Vec<String>,
    /// How often the holder of the store lock rewrites its heartbeat (at least 1).
    pub lock_heartbeat_seconds: u64,
    /// A lock whose heartbeat is older than this (on another host) may be taken over.
    pub lock_stale_after_seconds: u64,
    /// After taking a lock over, how long a new holder waits (answering nothing) before it
    /// reads the lock again and stands down if a holder of a higher epoch appeared: a sync
    /// engine may let two machines believe they won.
    pub takeover_settle_seconds: u64,
    /// After taking a lock over from another machine (or finding that machine still writing
    /// its lock, a partition healing), how long inbox messages that machine may have seen
    /// (those already there) wait for its answer to arrive through the sync engine before
    /// this holder answers them itself. A partition shorter than this answers no message
    /// twice; 0 answers them at once (a partition may then answer some twice).
    pub takeover_hold_seconds: u64,
}

impl Default for OrchestratorConfig {
    fn default() -> Self {
        OrchestratorConfig {
            polling_interval_seconds: 10,
            max_messages_per_loop: 50,
            enable_job_completion_handler: true,
            singleton_lock_file: ".orchestrator.lock".to_string(),
            idle_exit_seconds: 300,
            standby: Vec::new(),
            lock_heartbeat_seconds: 30,
            lock_stale_after_seconds: 120,
            takeover_settle_seconds: 5,
            takeover_hold_seconds: 300,
        }
    }
}

impl OrchestratorConfig {
    /// The lock's heartbeat interval, 1 s .. 1 h.
    pub fn lock_heartbeat(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.lock_heartbeat_seconds.clamp(1, 3600))
    }

    /// When a silent lock counts as stale: at least twice the heartbeat, at most a day.
    pub fn lock_stale_after(&self) -> std::time::Duration {
        let min = 2 * self.lock_heartbeat_seconds.clamp(1, 3600);
        std::time::Duration::from_secs(self.lock_stale_after_seconds.clamp(min, 86_400))
    }

    /// The settle delay after a take-over, at most 10 minutes.
    pub fn takeover_settle(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.takeover_settle_seconds.min(600))
    }

    /// How long messages the previous holder may have answered wait after a take-over, at
    /// most a day.
    pub fn takeover_hold(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.takeover_hold_seconds.min(86_400))
    }

    /// True when `host` (a machine's key in the store) is listed in `standby`, or this
    /// machine is and `host` is its key: a list may name machines by host name.
    pub fn is_standby_host(&self, host: &str) -> bool {
        self.standby.iter().any(|h| {
            h == host || (host == super::hostname() && *h == super::identity::display_hostname())
        })
    }
}

/// `machines:` section: heartbeats (`machines/<host>/<daemon>.json`) and when a silent
/// machine's running jobs are failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MachinesConfig {
    /// How often each daemon writes its heartbeat (at least 1).
    pub heartbeat_seconds: u64,
    /// A machine silent for longer is shown as stale (and signalled on D-Bus).
    pub stale_after_seconds: u64,
    /// A running job whose machine has been silent for longer is failed with "Machine
    /// <host> stopped reporting at <time>".
    pub lost_job_grace_seconds: u64,
    /// The store is ONE filesystem for every machine (NFS, a bind mount), not a sync engine:
    /// a start's claim (one rename) is then atomic across machines and several machines may
    /// serve one queue. False (the default): a queue manager stands down while another live
    /// machine whose manager of the queue started first serves it.
    pub shared_filesystem: bool,
}

impl Default for MachinesConfig {
    fn default() -> Self {
        MachinesConfig {
            heartbeat_seconds: 30,
            stale_after_seconds: 120,
            lost_job_grace_seconds: 600,
            shared_filesystem: false,
        }
    }
}

impl MachinesConfig {
    /// The heartbeat interval, bounded to 1 s .. 1 h.
    pub fn heartbeat(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.heartbeat_seconds.clamp(1, 3600))
    }
}

/// `slack:` section (v1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct SlackConfig {
    /// Bot token.
    pub token: Option<String>,
    /// Whether the Slack handler runs.
    pub enabled: bool,
}

/// `logging:` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LoggingConfig {
    /// `ERROR`, `WARN`, `INFO`, `DEBUG` or `TRACE`.
    pub level: String,
    /// Event log path relative to the root; `{YYYY-MM}` is replaced by the month.
    pub events_file: String,
    /// Largest size of one log file in the store (`JSONValidation/errors.out`, the event
    /// logs, the daemon logs under `logs/`) before it is rotated to `<name>.1`.
    pub max_file_bytes: u64,
    /// Rotated files kept per log (`<name>.1` … `<name>.<keep_files>`).
    pub keep_files: usize,
}

impl Default for LoggingConfig {
    fn default() -> Self {
        LoggingConfig {
            level: "INFO".to_string(),
            events_file: "logs/events-{YYYY-MM}.jsonl".to_string(),
            max_file_bytes: super::safe::DEFAULT_LOG_LIMITS.max_bytes,
            keep_files: super::safe::DEFAULT_LOG_LIMITS.keep,
        }
    }
}

/// Errors reading `config.yaml`.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Unreadable file.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// Bad YAML or an unknown/mistyped key.
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// What serde said, naming the key and the line.
        message: String,
    },
}

impl Config {
    /// Parses YAML text; `origin` names the file in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Config, ConfigError> {
        if text.trim().is_empty() {
            return Ok(Config::default());
        }
        let c: Config = serde_norway::from_str(text).map_err(|e| ConfigError::Parse {
            path: origin.to_string(),
            message: e.to_string(),
        })?;
        if let Some(v) = &c.schema_version {
            use crate::model::flow::{SCHEMA_VERSION, compare_versions};
            match compare_versions(v, SCHEMA_VERSION) {
                Some(std::cmp::Ordering::Greater) => {
                    return Err(ConfigError::Parse {
                        path: origin.to_string(),
                        message: format!(
                            "schema_version {v:?}: this store was upgraded by a newer agentstore; this one understands schema versions up to {SCHEMA_VERSION} and refuses to work on it (install the newer agentstore here too)"
                        ),
                    });
                }
                None => {
                    return Err(ConfigError::Parse {
                        path: origin.to_string(),
                        message: format!(
                            "schema_version {v:?} is not a version like \"{SCHEMA_VERSION}\""
                        ),
                    });
                }
                _ => {}
            }
        }
        Ok(c)
    }

    /// The store's schema version (absent: 0.5).
    pub fn schema_version(&self) -> &str {
        self.schema_version
            .as_deref()
            .unwrap_or(crate::model::flow::SCHEMA_VERSION_ABSENT)
    }

    /// Loads `path`; a missing file gives the defaults.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = super::safe::open_read(path).and_then(|mut f| {
            let mut t = String::new();
            std::io::Read::read_to_string(&mut f, &mut t).map(|_| t)
        });
        match text {
            Ok(t) => Config::parse(&t, &path.display().to_string()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Config::default()),
            Err(source) => Err(ConfigError::Read {
                path: path.display().to_string(),
                source,
            }),
        }
    }

    /// The YAML a new store starts with.
    pub fn default_yaml(root: &Path) -> String {
        Config::default_yaml_for_queue(root, &default_queue())
    }

    /// The YAML a new store starts with, `queue` its default queue (a valid id: letters,
    /// digits, `-`, `_`, `.`; quoted as YAML reads it).
    pub fn default_yaml_for_queue(root: &Path, queue: &str) -> String {
        format!(
            "# agentstore global configuration (PRD §2.2, §13.1)\n\
             agent_store_root: {root:?}\n\
             queues_default: {queue:?}\n\
             \n\
             orchestrator:\n  \
               polling_interval_seconds: 10\n  \
               max_messages_per_loop: 50\n  \
               enable_job_completion_handler: true\n  \
               singleton_lock_file: \".orchestrator.lock\"\n  \
               idle_exit_seconds: 300\n\
             \n\
             slack:\n  token: null\n  enabled: false\n\
             \n\
             logging:\n  level: \"INFO\"\n  events_file: \"logs/events-{{YYYY-MM}}.jsonl\"\n\
             \n\
             # schema version of this store's documents (orchestrator migrate)\n\
             schema_version: \"{version}\"\n",
            root = root.display().to_string(),
            version = crate::model::flow::SCHEMA_VERSION
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PRD_13_1: &str = r#"
agent_store_root: "/home/chenry/Dropbox/AgentStore"
queues_default: "poplar"

orchestrator:
  polling_interval_seconds: 10
  max_messages_per_loop: 50
  enable_job_completion_handler: true
  singleton_lock_file: ".orchestrator.lock"

slack:
  token: null
  enabled: false

logging:
  level: "INFO"
  events_file: "logs/events-{YYYY-MM}.jsonl"
"#;

    #[test]
    fn prd_example_parses() {
        let c = Config::parse(PRD_13_1, "config.yaml").unwrap();
        assert_eq!(c.queues_default, "poplar");
        assert_eq!(c.orchestrator.max_messages_per_loop, 50);
        assert_eq!(
            c.agent_store_root.as_deref(),
            Some("/home/chenry/Dropbox/AgentStore")
        );
    }

    #[test]
    fn unknown_key_is_named() {
        let err = Config::parse(
            "queues_default: x\norchestrator:\n  polling_intervall: 3\n",
            "c.yaml",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("polling_intervall"), "{err}");
        assert!(err.contains("c.yaml"), "{err}");
    }

    #[test]
    fn default_yaml_round_trips() {
        let c = Config::parse(&Config::default_yaml(Path::new("/x/y")), "d").unwrap();
        assert_eq!(c.agent_store_root.as_deref(), Some("/x/y"));
        assert_eq!(c.orchestrator, OrchestratorConfig::default());
    }
}
