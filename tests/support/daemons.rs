//! The one launcher of each daemon a test runs as a child process: [`orchestratord`] and
//! [`queue_manager`] give a [`Launch`] with what every test wants (the store root, no bus,
//! `--idle-exit 0`, the queue manager's direct launcher, logs at `warn` on the test's stderr,
//! stdout dropped), which the test adjusts (a bus, a host name, more arguments) and spawns.
//! The options are set once each, so no flag reaches the daemon twice. [`unit_like`] starts a
//! daemon as a user unit does (no flags but the caller's), and [`Daemon::path`] is the one
//! place the tests name the built binaries.

use crate::harness::{KillOnDrop, PrivateBus};
use std::ffi::{OsStr, OsString};
use std::path::Path;
use std::process::{Command, Stdio};

/// A daemon about to be started.
pub struct Launch {
    bin: &'static str,
    fixed: Vec<OsString>,
    bus: Option<OsString>,
    idle_exit: Option<String>,
    launcher: Option<&'static str>,
    args: Vec<OsString>,
    envs: Vec<(OsString, OsString)>,
    removed: Vec<OsString>,
    stderr: Option<Stdio>,
}

/// A daemon binary of this build.
#[derive(Clone, Copy, Debug)]
pub enum Daemon {
    Orchestratord,
    QueueManager,
}

impl Daemon {
    /// The built binary.
    pub fn path(self) -> &'static str {
        match self {
            Daemon::Orchestratord => env!("CARGO_BIN_EXE_orchestratord"),
            Daemon::QueueManager => env!("CARGO_BIN_EXE_queue-manager"),
        }
    }
}

/// The daemon as a user unit starts it: the binary and the arguments the caller adds, no
/// more (its store from `AGENT_STORE_ROOT`, its bus chosen by default, from the environment
/// the caller's scope sets: what these tests check must just work).
pub fn unit_like(daemon: Daemon) -> Launch {
    Launch {
        bin: daemon.path(),
        fixed: Vec::new(),
        bus: None,
        idle_exit: None,
        launcher: None,
        args: Vec::new(),
        envs: Vec::new(),
        removed: Vec::new(),
        stderr: None,
    }
}

/// `orchestratord --root ROOT --bus none --idle-exit 0`.
pub fn orchestratord(root: &Path) -> Launch {
    Launch::new(Daemon::Orchestratord, root, &[], None)
}

/// `queue-manager --queue QUEUE --root ROOT --bus none --idle-exit 0 --launcher direct`.
pub fn queue_manager(root: &Path, queue: &str) -> Launch {
    Launch::new(
        Daemon::QueueManager,
        root,
        &["--queue", queue],
        Some("direct"),
    )
}

impl Launch {
    fn new(daemon: Daemon, root: &Path, fixed: &[&str], launcher: Option<&'static str>) -> Launch {
        let mut f: Vec<OsString> = fixed.iter().map(OsString::from).collect();
        f.push("--root".into());
        f.push(root.into());
        Launch {
            bin: daemon.path(),
            fixed: f,
            bus: Some("none".into()),
            idle_exit: Some("0".into()),
            launcher,
            args: Vec::new(),
            envs: vec![("RUST_LOG".into(), "warn".into())],
            removed: Vec::new(),
            stderr: None,
        }
    }

    /// On the private `bus` (as its session bus).
    pub fn on(mut self, bus: &PrivateBus) -> Launch {
        self.bus = Some("session".into());
        self.env("DBUS_SESSION_BUS_ADDRESS", &bus.address)
    }

    /// `--bus VALUE` (`none`, `session`, `system` or an address).
    pub fn bus(mut self, value: &str) -> Launch {
        self.bus = Some(value.into());
        self
    }

    /// `--idle-exit SECS`; `None`: the daemon's own default.
    pub fn idle_exit(mut self, secs: Option<&str>) -> Launch {
        self.idle_exit = secs.map(str::to_string);
        self
    }

    /// `--launcher NAME` of the queue manager (`direct` unless set); `None`: the queue's own.
    pub fn launcher(mut self, name: Option<&'static str>) -> Launch {
        self.launcher = name;
        self
    }

    /// As machine `host` (`AGENTSTORE_HOSTNAME`).
    pub fn host(self, host: &str) -> Launch {
        self.env("AGENTSTORE_HOSTNAME", host)
    }

    /// More arguments.
    pub fn args<S: AsRef<OsStr>>(mut self, args: impl IntoIterator<Item = S>) -> Launch {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_os_string()));
        self
    }

    /// A variable of the daemon's environment.
    pub fn env(mut self, k: impl AsRef<OsStr>, v: impl AsRef<OsStr>) -> Launch {
        self.envs
            .push((k.as_ref().to_os_string(), v.as_ref().to_os_string()));
        self
    }

    /// A variable of the test's environment the daemon must not see.
    pub fn env_remove(mut self, k: &str) -> Launch {
        self.removed.push(k.into());
        self
    }

    /// Variables of the daemon's environment.
    pub fn envs(mut self, vars: &[(&str, &str)]) -> Launch {
        for (k, v) in vars {
            self = self.env(k, v);
        }
        self
    }

    /// Where its stderr goes (the test's own stderr unless set).
    pub fn stderr(mut self, to: impl Into<Stdio>) -> Launch {
        self.stderr = Some(to.into());
        self
    }

    /// The command, to run some other way (`output()`, wrapped in another command).
    pub fn command(self) -> Command {
        let mut c = Command::new(self.bin);
        c.args(&self.fixed);
        if let Some(bus) = &self.bus {
            c.arg("--bus").arg(bus);
        }
        if let Some(secs) = &self.idle_exit {
            c.args(["--idle-exit", secs]);
        }
        if let Some(l) = self.launcher {
            c.args(["--launcher", l]);
        }
        for k in &self.removed {
            c.env_remove(k);
        }
        c.args(&self.args)
            .envs(self.envs.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(self.stderr.unwrap_or_else(Stdio::inherit));
        c
    }

    /// Started; killed (and reaped) on drop.
    pub fn spawn(self) -> KillOnDrop {
        let bin = self.bin;
        KillOnDrop(
            self.command()
                .spawn()
                .unwrap_or_else(|e| panic!("{bin}: {e}")),
        )
    }
}
