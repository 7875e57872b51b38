//! Kernel confinement of the commands an agent runs (DESIGN §9: the kernel is the wall, the
//! policy is the gate).
//!
//! A [`SandboxPolicy`] is a small value: the paths a confined process may read (and execute),
//! the paths it may write, the paths inside those it may not write, the TCP ports it may
//! connect to, whether it may signal or reach abstract Unix sockets outside itself. It is
//! turned into a Landlock ruleset in the parent ([`SandboxPolicy::compile`], then
//! [`Compiled::prepare`] before each spawn); the child only makes plain system calls between
//! fork and exec ([`Prepared::confine_child`]): `unshare` and `mount` for the read-only
//! subpaths, `prctl(PR_SET_NO_NEW_PRIVS)`, `landlock_restrict_self`. The same code confines
//! agentshell's `run_command` ([`session`]) and the worker's unattended jobs.
//!
//! What the kernel enforces, by Landlock ABI (detected at run time, [`Support::detect`]):
//! 1 files (read/write/execute/make/remove beneath a path), 2 renames and links across
//! directories, 3 truncation, 4 TCP connect and bind per port, 5 device ioctls, 6 signals and
//! abstract Unix sockets outside the sandbox. `ptrace` of a process outside the sandbox is
//! refused at every ABI. Landlock grants by allow-list and a grant covers a whole subtree, so a
//! subpath of a writable tree (`.git/hooks`, `.git/config`, `.agentshell/`) is kept read-only
//! by a bind mount in a private mount namespace made for the child (a user namespace too when
//! the process is not root); a confined process cannot unmount it (Landlock refuses mount
//! changes). Where that namespace cannot be made, [`Support::level`] says `partial`.
//!
//! Limits (not enforced by the kernel here): UDP and other non-TCP sockets; connecting to
//! path-named Unix sockets that exist in readable directories; files created later inside a
//! writable tree next to a protected subpath (a new `.git/commondir`, say); the CPU, memory and
//! time a command takes (the job's scope and the command timeout bound those).
// The child side has no safe form: pre_exec, unshare, mount and the Landlock system call.
#![allow(unsafe_code)]

pub mod audit;
pub mod leftovers;
mod namespace;
pub mod reaper;
mod seccomp;
pub mod session;
pub mod supervise;

use namespace::Namespace;

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, NetPort, PathBeneath,
    PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr, Scope,
};
use serde::Serialize;
use thiserror::Error;

/// The newest Landlock ABI this code was written and tested against; rights of later ABIs are
/// not requested (so a newer kernel cannot change what a command may do).
pub const TESTED_ABI: i32 = 7;

/// `landlock_restrict_self` flag (ABI 7): log refusals of the programs executed after it.
const LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON: libc::c_uint = 1 << 1;

/// How much of the policy the kernel enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// Files, TCP, signals and abstract sockets, read-only subpaths (ABI ≥ 6 and a mount
    /// namespace).
    Enforced,
    /// Some of it (an older ABI, or no mount namespace for the read-only subpaths).
    Partial,
    /// Nothing but `no_new_privs` and the environment (no Landlock).
    None,
}

/// What this kernel offers, as reported at start (`/status`, exec's JSON `sandbox`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Support {
    /// The level.
    pub level: Level,
    /// The Landlock ABI used (0: none).
    pub abi: i32,
    /// Whether read-only subpaths can be bind-mounted in a private mount namespace.
    pub mount_namespace: bool,
}

impl Support {
    /// The kernel's support, capped at `max_abi` (a lower cap only: tests and users may ask for
    /// less confinement to see the fallback, never for more than the kernel has).
    pub fn detect(max_abi: Option<i32>) -> Support {
        let kernel = kernel_abi();
        let abi = kernel
            .min(TESTED_ABI)
            .min(max_abi.unwrap_or(i32::MAX))
            .max(0);
        let mount_namespace = abi > 0 && mount_namespace_works();
        let level = match abi {
            0 => Level::None,
            a if a >= 6 && mount_namespace => Level::Enforced,
            _ => Level::Partial,
        };
        Support {
            level,
            abi,
            mount_namespace,
        }
    }

    /// One line for a person: `enforced (Landlock ABI 7)`.
    pub fn describe(&self) -> String {
        match self.level {
            Level::Enforced => format!("enforced (Landlock ABI {})", self.abi),
            Level::Partial if !self.mount_namespace && self.abi > 0 => format!(
                "partial (Landlock ABI {}; no mount namespace for read-only subpaths)",
                self.abi
            ),
            Level::Partial => format!(
                "partial (Landlock ABI {}; TCP, signal or socket rules need a newer kernel)",
                self.abi
            ),
            Level::None => "none (no Landlock in this kernel: commands are not confined)".into(),
        }
    }
}

/// The Landlock ABI of the running kernel (0 when Landlock is absent or disabled).
pub fn kernel_abi() -> i32 {
    static ABI_VERSION: OnceLock<i32> = OnceLock::new();
    *ABI_VERSION.get_or_init(|| {
        const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
        // SAFETY: landlock_create_ruleset with a null attribute, size 0 and the VERSION flag
        // only returns the ABI number (or -1); it touches no memory of ours.
        let v = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                std::ptr::null::<libc::c_void>(),
                0usize,
                LANDLOCK_CREATE_RULESET_VERSION,
            )
        };
        i32::try_from(v).unwrap_or(0).max(0)
    })
}

/// Whether a child can make a private mount namespace (and a user namespace when not root)
/// and bind-mount read-only in it: tried once with `/bin/true`.
fn mount_namespace_works() -> bool {
    static WORKS: OnceLock<bool> = OnceLock::new();
    *WORKS.get_or_init(|| {
        let Ok(ns) = Namespace::prepare(&[(PathBuf::from("/"), true)], &[]) else {
            return false;
        };
        let mut cmd = std::process::Command::new("/bin/true");
        cmd.stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        {
            use std::os::unix::process::CommandExt;
            // SAFETY: the closure only makes the system calls of Namespace::enter on data
            // prepared before the fork (see Prepared::confine_child).
            unsafe {
                cmd.pre_exec(move || ns.enter());
            }
        }
        cmd.status().is_ok_and(|s| s.success())
    })
}

/// The confinement could not be prepared.
#[derive(Debug, Error)]
pub enum SandboxError {
    /// Building the Landlock ruleset failed.
    #[error("building the Landlock ruleset: {0}")]
    Ruleset(#[from] landlock::RulesetError),
    /// A path could not be turned into a C string (it contains NUL).
    #[error("path {0} contains a NUL byte")]
    Path(PathBuf),
    /// Reading a mount's flags failed.
    #[error("reading the mount flags of {path}: {source}")]
    Statvfs {
        /// The path.
        path: PathBuf,
        /// The cause.
        source: nix::Error,
    },
    /// A scratch directory could not be made.
    #[error("creating the scratch directory {path}: {source}")]
    Scratch {
        /// The path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

/// What a confined process may do: the small value every confinement is built from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SandboxPolicy {
    /// Trees (or files) it may read and execute.
    pub read: Vec<PathBuf>,
    /// Trees (or files) it may also write: create, change, remove, rename within.
    pub write: Vec<PathBuf>,
    /// Trees (or files) it may also write only when the user allowed it network (a download
    /// cache: without network nothing is downloaded into it, and what is there — sources
    /// that later builds run — stays as it was).
    pub write_with_network: Vec<PathBuf>,
    /// Paths inside `write` kept read-only (bind-mounted read-only; skipped when absent).
    pub read_only: Vec<PathBuf>,
    /// Directories inside `write` that stay writable but may not be renamed or removed
    /// (bind-mounted onto themselves: a mount point cannot be moved), e.g. `.git`, so that a
    /// fresh `.git` cannot replace the one whose hooks and config are read-only.
    pub pinned: Vec<PathBuf>,
    /// Files inside readable trees that no confined process may read: `/dev/null` is bound
    /// over each (credentials files of the project: a command that cannot read a secret
    /// cannot answer yes/no guesses about it either). Needs the mount namespace.
    pub hidden: Vec<PathBuf>,
    /// Character devices it may read, write and ioctl (`/dev/null`, `/dev/tty`…).
    pub devices: Vec<PathBuf>,
    /// TCP: `None` leaves TCP unrestricted; `Some(ports)` allows connecting to those ports
    /// only and binding none.
    pub connect_ports: Option<Vec<u16>>,
    /// Refuse signals to processes outside the sandbox.
    pub scope_signals: bool,
    /// Refuse connecting to abstract Unix sockets made outside the sandbox.
    pub scope_abstract_sockets: bool,
    /// Allow only TCP sockets (whose connect and bind the Landlock rules govern): a seccomp
    /// filter refuses creating UDP, raw, Unix, netlink… sockets and io_uring (which could
    /// create them past the filter). Landlock does not cover those: UDP (DNS) would carry
    /// data out, and a path-named Unix socket (`/var/run/docker.sock`) reached by `connect`
    /// is not a file access.
    pub tcp_only: bool,
    /// Hand the socket calls Landlock does not govern to a supervisor in the parent, which
    /// refuses all but these and records what it refused ([`supervise`]): for unattended
    /// jobs, whose record says what the sandbox refused.
    pub supervise_sockets: Option<supervise::SocketRules>,
    /// Ask the kernel to log what Landlock refuses the programs it runs (ABI 7; logged only
    /// while the kernel's audit is on, read by [`audit::AuditWatch`]).
    pub log_denials: bool,
}

impl SandboxPolicy {
    /// Look the paths up once (missing ones are skipped): the part of the ruleset that does
    /// not change between spawns. They are opened only while a ruleset is built (a ruleset
    /// keeps what it needs): a session holds no descriptor per path.
    pub fn compile(&self, support: Support) -> Compiled {
        let open = |paths: &[PathBuf]| -> Vec<(PathBuf, bool)> {
            paths
                .iter()
                .filter_map(|p| Some((p.clone(), std::fs::metadata(p).ok()?.is_dir())))
                .collect()
        };
        let compiled = Compiled {
            support,
            read: open(&self.read),
            write: open(&self.write),
            write_with_network: open(&self.write_with_network),
            devices: open(&self.devices),
            policy: self.clone(),
            rulesets: Default::default(),
            refusals: supervise::Refusals::default(),
        };
        // Both rulesets now, from the paths as they are at the start (what a later command
        // did to the tree never changes what a ruleset names); one that fails is tried
        // again, and its error reported, at the first spawn that needs it.
        if support.abi > 0 {
            let abi = ABI::from(support.abi);
            for network in [false, true] {
                if let Ok(fd) = compiled.ruleset(abi, network) {
                    let _ = compiled.rulesets[usize::from(network)].set(Arc::new(fd));
                }
            }
        }
        compiled
    }
}

/// A policy with its paths opened, ready to [`prepare`](Compiled::prepare) a spawn.
#[derive(Debug)]
pub struct Compiled {
    support: Support,
    read: Vec<(PathBuf, bool)>,
    write: Vec<(PathBuf, bool)>,
    write_with_network: Vec<(PathBuf, bool)>,
    devices: Vec<(PathBuf, bool)>,
    policy: SandboxPolicy,
    /// The rulesets, built on first use and shared by every child (a ruleset fd can restrict
    /// any number of processes): without, with network.
    rulesets: [OnceLock<Arc<OwnedFd>>; 2],
    /// What the socket supervisors of its children refused.
    refusals: supervise::Refusals,
}

impl Compiled {
    /// The policy it was built from.
    pub fn policy(&self) -> &SandboxPolicy {
        &self.policy
    }

    /// What the kernel enforces of it.
    pub fn support(&self) -> Support {
        self.support
    }

    /// What the socket supervisors of its children refused so far.
    pub fn refusals(&self) -> Vec<String> {
        self.refusals.lines()
    }

    /// Build the ruleset and the namespace steps for one child. `network` lifts the TCP rules
    /// for this child (the user allowed network for this command).
    pub fn prepare(&self, network: bool) -> Result<Prepared, SandboxError> {
        let abi = ABI::from(self.support.abi);
        let ruleset = if self.support.abi > 0 {
            let slot = &self.rulesets[usize::from(network)];
            Some(match slot.get() {
                Some(fd) => Arc::clone(fd),
                None => {
                    let fd = Arc::new(self.ruleset(abi, network)?);
                    Arc::clone(slot.get_or_init(|| fd))
                }
            })
        } else {
            None
        };
        let namespace = if self.support.mount_namespace {
            // A symlinked subpath (`.git/hooks -> ../hooks`) is protected where it leads.
            let target = |p: &PathBuf| p.canonicalize().ok();
            let present: Vec<(PathBuf, bool)> = self
                .policy
                .pinned
                .iter()
                .filter_map(target)
                .map(|p| (p, false))
                .chain(
                    self.policy
                        .read_only
                        .iter()
                        .filter_map(target)
                        .map(|p| (p, true)),
                )
                .collect();
            let hide: Vec<PathBuf> = self
                .policy
                .hidden
                .iter()
                .filter_map(target)
                .filter(|p| p.is_file())
                .collect();
            (!present.is_empty() || !hide.is_empty())
                .then(|| Namespace::prepare(&present, &hide))
                .transpose()?
        } else {
            None
        };
        let (channel, supervise) = match (&self.policy.supervise_sockets, supervise::filter()) {
            (Some(rules), Some(filter)) if !network => {
                let (parent, child) = supervise::channel(rules.clone(), self.refusals.clone())
                    .map_err(|source| SandboxError::Scratch {
                        path: PathBuf::from("(socket pair)"),
                        source,
                    })?;
                (Some(parent), Some((filter, child)))
            }
            _ => (None, None),
        };
        Ok(Prepared {
            ruleset,
            namespace,
            channel,
            supervise,
            drop_capabilities: nix::unistd::geteuid().is_root(),
            restrict_flags: if self.policy.log_denials && self.support.abi >= 7 {
                LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON
            } else {
                0
            },
            socket_filter: (self.policy.tcp_only && !network)
                .then(seccomp::socket_filter)
                .flatten(),
        })
    }

    fn ruleset(&self, abi: ABI, network: bool) -> Result<OwnedFd, SandboxError> {
        let handled = AccessFs::from_all(abi);
        // Never device nodes: root could make one for the disk and read it raw.
        let all = handled & !(AccessFs::MakeBlock | AccessFs::MakeChar);
        let read = AccessFs::from_read(abi);
        let file_all = AccessFs::from_file(abi);
        let mut ruleset = Ruleset::default()
            .set_compatibility(CompatLevel::BestEffort)
            .handle_access(handled)?;
        let restrict_net = !network && self.policy.connect_ports.is_some() && self.support.abi >= 4;
        if restrict_net {
            ruleset = ruleset.handle_access(AccessNet::from_all(abi))?;
        }
        if self.support.abi >= 6 {
            let mut scopes = BitFlags::<Scope>::EMPTY;
            if self.policy.scope_signals {
                scopes |= Scope::Signal;
            }
            if self.policy.scope_abstract_sockets {
                scopes |= Scope::AbstractUnixSocket;
            }
            if !scopes.is_empty() {
                ruleset = ruleset.scope(scopes)?;
            }
        }
        let mut created = ruleset.create()?;
        // Each path is opened for its rule and closed right after (a path gone since
        // `compile` is skipped, as a missing one was there).
        for (p, is_dir) in &self.read {
            let access = if *is_dir { read } else { read & file_all };
            if let Ok(fd) = PathFd::new(p) {
                created = created.add_rule(PathBeneath::new(fd, access))?;
            }
        }
        let network_writes = if network {
            &self.write_with_network[..]
        } else {
            &[]
        };
        for (p, is_dir) in self.write.iter().chain(network_writes) {
            let access = if *is_dir { all } else { file_all };
            if let Ok(fd) = PathFd::new(p) {
                created = created.add_rule(PathBeneath::new(fd, access))?;
            }
        }
        for (p, _) in &self.devices {
            if let Ok(fd) = PathFd::new(p) {
                created = created.add_rule(PathBeneath::new(fd, file_all))?;
            }
        }
        if restrict_net {
            for port in self.policy.connect_ports.iter().flatten() {
                created = created.add_rule(NetPort::new(*port, AccessNet::ConnectTcp))?;
            }
        }
        let fd: Option<OwnedFd> = created.into();
        fd.ok_or(SandboxError::Ruleset(landlock::RulesetError::from(
            landlock::CreateRulesetError::MissingHandledAccess,
        )))
    }
}

/// One child's confinement, prepared before fork; [`confine_child`](Prepared::confine_child)
/// applies it between fork and exec.
#[derive(Debug)]
pub struct Prepared {
    ruleset: Option<Arc<OwnedFd>>,
    namespace: Option<Namespace>,
    /// Empty the capability bounding set (a root parent): root's capabilities would let a
    /// command load kernel modules, open raw sockets past the TCP rules, or read another
    /// process's `/proc/PID/environ` past Landlock.
    drop_capabilities: bool,
    /// The flags of `landlock_restrict_self` ([`SandboxPolicy::log_denials`]).
    restrict_flags: libc::c_uint,
    /// The seccomp program of [`SandboxPolicy::tcp_only`].
    socket_filter: Option<Vec<libc::sock_filter>>,
    /// The parent's side of [`SandboxPolicy::supervise_sockets`], until taken.
    channel: Option<supervise::Channel>,
    /// The child's side: the program and its end of the channel.
    supervise: Option<(Vec<libc::sock_filter>, OwnedFd)>,
}

impl Prepared {
    /// Apply the confinement to the calling process: read-only binds in a private mount
    /// namespace, `no_new_privs`, the Landlock ruleset. Meant for the forked child before
    /// exec: it only makes system calls on data prepared before the fork (no allocation, no
    /// locks), so it is async-signal-safe.
    pub fn confine_child(&self) -> std::io::Result<()> {
        if let Some(ns) = &self.namespace {
            ns.enter()?;
        }
        if self.drop_capabilities {
            for cap in 0..64 {
                // SAFETY: prctl(PR_CAPBSET_DROP) changes only this process's bounding set.
                if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) } != 0 {
                    let e = std::io::Error::last_os_error();
                    // EINVAL: past the kernel's last capability.
                    if e.raw_os_error() != Some(libc::EINVAL) {
                        return Err(e);
                    }
                    break;
                }
            }
            // SAFETY: as above, for the ambient set.
            let r = unsafe {
                libc::prctl(
                    libc::PR_CAP_AMBIENT,
                    libc::PR_CAP_AMBIENT_CLEAR_ALL,
                    0,
                    0,
                    0,
                )
            };
            if r != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        // SAFETY: prctl(PR_SET_NO_NEW_PRIVS, 1) changes only this process's flags.
        if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if let Some(filter) = &self.socket_filter {
            let program = libc::sock_fprog {
                len: u16::try_from(filter.len()).unwrap_or(0),
                filter: filter.as_ptr().cast_mut(),
            };
            // SAFETY: installs a seccomp filter on this process from a program made before
            // the fork; the kernel copies it; no_new_privs is set above.
            let r = unsafe {
                libc::prctl(
                    libc::PR_SET_SECCOMP,
                    libc::SECCOMP_MODE_FILTER,
                    &program as *const libc::sock_fprog,
                    0,
                    0,
                )
            };
            if r != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        if let Some((filter, chan)) = &self.supervise {
            supervise::install(filter, chan.as_raw_fd())?;
        }
        if let Some(fd) = &self.ruleset {
            // SAFETY: landlock_restrict_self on a ruleset fd we own, with logging flags only;
            // it changes only this process's credentials.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_landlock_restrict_self,
                    fd.as_raw_fd(),
                    self.restrict_flags,
                )
            };
            if r != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }

    /// The parent's side of the socket supervisor (when the policy has one): take it before
    /// installing, and call [`supervise::Channel::supervise`] once the child is spawned.
    pub fn take_channel(&mut self) -> Option<supervise::Channel> {
        self.channel.take()
    }

    /// Install [`confine_child`](Prepared::confine_child) before exec of a std command.
    pub fn install_std(self, cmd: &mut std::process::Command) {
        use std::os::unix::process::CommandExt;
        // SAFETY: the closure only calls confine_child, async-signal-safe (see there).
        unsafe {
            cmd.pre_exec(move || self.confine_child());
        }
    }

    /// Install [`confine_child`](Prepared::confine_child) as the last step before exec of a
    /// tokio command.
    pub fn install_tokio(self, cmd: &mut tokio::process::Command) {
        // SAFETY: the closure only calls confine_child, async-signal-safe (see there).
        unsafe {
            cmd.pre_exec(move || self.confine_child());
        }
    }
}

/// The system trees every confined program needs to start and work: read and execute.
/// `/etc` is listed entry by entry so that key files (`shadow`, `ssh/` host keys,
/// `ssl/private`, `sudoers`) stay out even for root.
pub fn system_read_paths() -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = [
        "/usr",
        "/bin",
        "/sbin",
        "/lib",
        "/lib32",
        "/lib64",
        "/libx32",
        "/opt",
        "/proc",
        "/sys",
        "/var/lib/dpkg",
        "/var/cache/ldconfig",
        "/run/systemd/resolve",
    ]
    .iter()
    .map(PathBuf::from)
    .collect();
    /// Entries of /etc that hold keys or password hashes.
    const ETC_SECRETS: &[&str] = &[
        "shadow",
        "shadow-",
        "gshadow",
        "gshadow-",
        "ssh",
        "ssl",
        "sudoers",
        "sudoers.d",
        "security",
        "krb5.keytab",
        "NetworkManager",
        "wpa_supplicant",
        "credstore",
        "credstore.encrypted",
        "agentstore",
        "letsencrypt",
        "pki",
        "libvirt",
        "docker",
    ];
    if let Ok(entries) = std::fs::read_dir("/etc") {
        for e in entries.flatten() {
            let name = e.file_name();
            if !ETC_SECRETS
                .iter()
                .any(|s| name.as_encoded_bytes() == s.as_bytes())
            {
                paths.push(e.path());
            }
        }
    }
    // Public CA certificates and the ssh client's configuration are not keys.
    for p in [
        "/etc/ssl/certs",
        "/etc/ssl/openssl.cnf",
        "/etc/ssh/ssh_config",
    ] {
        paths.push(PathBuf::from(p));
    }
    paths
}

/// Character devices a confined program may use.
pub fn standard_devices() -> Vec<PathBuf> {
    [
        "/dev/null",
        "/dev/zero",
        "/dev/full",
        "/dev/random",
        "/dev/urandom",
        "/dev/tty",
    ]
    .iter()
    .map(PathBuf::from)
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cap_only_lowers_the_abi() {
        let kernel = kernel_abi().min(TESTED_ABI);
        assert_eq!(Support::detect(Some(0)).level, Level::None);
        assert_eq!(Support::detect(Some(0)).abi, 0);
        assert_eq!(Support::detect(Some(99)).abi, kernel);
        assert!(Support::detect(Some(3)).abi <= 3);
    }

    #[test]
    fn etc_keys_are_not_readable() {
        let paths = system_read_paths();
        assert!(!paths.contains(&PathBuf::from("/etc/shadow")));
        assert!(!paths.contains(&PathBuf::from("/etc/ssh")));
        assert!(paths.contains(&PathBuf::from("/usr")));
    }
}
