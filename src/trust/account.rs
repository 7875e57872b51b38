//! The account a job runs as, and the rule for which accounts a root daemon may choose
//! (issue 27): never uid 0; an account listed in `run_as.allowed_users`; else an ordinary
//! account — uid within `min_uid..=max_uid` (`UID_MIN`/`UID_MAX` of `/etc/login.defs` by
//! default), a login shell listed in `/etc/shells` — and, when `run_as.allowed_groups` is
//! set, a member of one of those groups. A daemon that is not root never switches account;
//! a root daemon of a user's own (not the system services) may run jobs as itself.
//! A job gets its account's own groups only (as `initgroups` gives them), nothing of the
//! daemon's.

use super::Policy;
use std::path::PathBuf;

/// The packaged services' own account (sysusers.d): orchestratord, agentstore-web and
/// agentstore-notify run as it; the root queue managers take it as a trusted front end that
/// answers approvals on a named user's behalf (`Queue1.AnswerFor`).
pub const SERVICE_ACCOUNT: &str = "agentstore";

/// The uid of [`SERVICE_ACCOUNT`] on this machine, if it exists.
pub fn service_uid() -> Option<u32> {
    Account::lookup(SERVICE_ACCOUNT).ok().map(|a| a.uid)
}

/// A resolved Unix account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    /// Login name.
    pub name: String,
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// Home folder from the password database.
    pub home: PathBuf,
    /// Login shell.
    pub shell: PathBuf,
    /// Its groups as `initgroups` would set them (the primary group and every group listing
    /// it in the group database), nothing else.
    pub groups: Vec<u32>,
}

/// Why no account could be chosen.
#[derive(Debug, thiserror::Error)]
pub enum AccountError {
    /// The account does not exist on this machine.
    #[error("Unix user {0:?} does not exist on this machine")]
    NoSuchUser(String),
    /// The password database could not be read.
    #[error("cannot look up Unix user {name:?}: {reason}")]
    Lookup {
        /// Login name.
        name: String,
        /// Cause.
        reason: String,
    },
}

impl Account {
    /// Looks `name` up in the password and group databases.
    pub fn lookup(name: &str) -> Result<Account, AccountError> {
        match nix::unistd::User::from_name(name) {
            Ok(Some(u)) => Ok(Account::from_nix(u)),
            Ok(None) => Err(AccountError::NoSuchUser(name.to_string())),
            Err(e) => Err(AccountError::Lookup {
                name: name.to_string(),
                reason: e.to_string(),
            }),
        }
    }

    /// The account of this process.
    pub fn current() -> Result<Account, AccountError> {
        let uid = nix::unistd::geteuid();
        match nix::unistd::User::from_uid(uid) {
            Ok(Some(u)) => Ok(Account::from_nix(u)),
            Ok(None) => Err(AccountError::NoSuchUser(uid.to_string())),
            Err(e) => Err(AccountError::Lookup {
                name: uid.to_string(),
                reason: e.to_string(),
            }),
        }
    }

    fn from_nix(u: nix::unistd::User) -> Account {
        let groups = std::ffi::CString::new(u.name.clone())
            .ok()
            .and_then(|n| nix::unistd::getgrouplist(&n, u.gid).ok())
            .map(|g| g.into_iter().map(|g| g.as_raw()).collect())
            .unwrap_or_else(|| vec![u.gid.as_raw()]);
        Account {
            name: u.name,
            uid: u.uid.as_raw(),
            gid: u.gid.as_raw(),
            home: u.dir,
            shell: u.shell,
            groups,
        }
    }
}

/// A job refused its account.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "Refused to run the job as Unix user {name} (uid {uid}): {reason} (the accounts jobs may run as are set by run_as in {origin})"
)]
pub struct RunAsRefused {
    /// Login name.
    pub name: String,
    /// Its uid.
    pub uid: u32,
    /// The rule it breaks.
    pub reason: String,
    /// Where the rules come from.
    pub origin: String,
}

/// The rules, with every name resolved (pure input of [`judge`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rules {
    /// Lowest ordinary uid.
    pub min_uid: u32,
    /// Highest ordinary uid.
    pub max_uid: u32,
    /// Allowed groups, by name and gid (a name with no group on this machine has None).
    pub allowed_groups: Vec<(String, Option<u32>)>,
    /// Accounts allowed by name.
    pub allowed_users: Vec<String>,
    /// Valid login shells (`/etc/shells`); None when that file cannot be read.
    pub shells: Option<Vec<String>>,
}

/// `UID_MIN` and `UID_MAX` of a `login.defs` text (1000 and 60000 when absent).
pub fn login_defs_range(text: &str) -> (u32, u32) {
    let mut min = 1000;
    let mut max = 60000;
    for line in text.lines() {
        let mut w = line.split_whitespace();
        match (w.next(), w.next().and_then(|v| v.parse::<u32>().ok())) {
            (Some("UID_MIN"), Some(v)) => min = v,
            (Some("UID_MAX"), Some(v)) => max = v,
            _ => {}
        }
    }
    (min, max)
}

/// The shells of an `/etc/shells` text.
pub fn shells_list(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| l.starts_with('/'))
        .map(str::to_string)
        .collect()
}

/// The rule itself (pure): may a daemon of uid `daemon_uid` (`system`: the system
/// services) run a job as `a`? The reason it may not, naming the rule.
pub fn judge(rules: &Rules, a: &Account, daemon_uid: u32, system: bool) -> Result<(), String> {
    if !system && a.uid == daemon_uid {
        // A user's own daemon runs jobs as that user (DESIGN §8): no switch.
        return Ok(());
    }
    if a.uid == 0 {
        return Err("jobs never run as root (uid 0)".into());
    }
    if rules.allowed_users.contains(&a.name) {
        return Ok(());
    }
    if a.uid < rules.min_uid || a.uid > rules.max_uid {
        return Err(format!(
            "uid {} is outside {}..={}, the ordinary accounts' range: a system account",
            a.uid, rules.min_uid, rules.max_uid
        ));
    }
    let shell = a.shell.display().to_string();
    let named = a
        .shell
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let listed = rules.shells.as_ref().is_none_or(|s| s.contains(&shell));
    if shell.is_empty() || named == "nologin" || named == "false" || !listed {
        return Err(format!(
            "its login shell {shell:?} is not a valid login shell (/etc/shells): an account that cannot log in"
        ));
    }
    if !rules.allowed_groups.is_empty()
        && !rules
            .allowed_groups
            .iter()
            .any(|(_, g)| g.is_some_and(|g| a.groups.contains(&g)))
    {
        return Err(format!(
            "it is a member of none of the allowed groups ({})",
            rules
                .allowed_groups
                .iter()
                .map(|(n, _)| n.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    Ok(())
}

/// The rules of `policy` on this machine (login.defs, /etc/shells, the group database).
pub fn rules(policy: &Policy) -> Rules {
    let (min, max) =
        login_defs_range(&std::fs::read_to_string("/etc/login.defs").unwrap_or_default());
    let p = &policy.run_as;
    Rules {
        min_uid: p.min_uid.unwrap_or(min),
        max_uid: p.max_uid.unwrap_or(max),
        allowed_groups: p
            .allowed_groups
            .iter()
            .map(|n| {
                let gid = nix::unistd::Group::from_name(n)
                    .ok()
                    .flatten()
                    .map(|g| g.gid.as_raw());
                (n.clone(), gid)
            })
            .collect(),
        allowed_users: p.allowed_users.clone(),
        shells: std::fs::read_to_string("/etc/shells")
            .ok()
            .map(|t| shells_list(&t)),
    }
}

/// Whether this process may run a job as `a` under `policy` (the one home of the run-as
/// rule: the queue manager asks before it starts a worker, the worker before it switches).
pub fn check_run_as(policy: &Policy, a: &Account) -> Result<(), RunAsRefused> {
    let daemon = nix::unistd::geteuid().as_raw();
    if daemon != 0 {
        // Not root: nothing to switch to; the job runs as this process's own account.
        return Ok(());
    }
    judge(&rules(policy), a, daemon, policy.system).map_err(|reason| RunAsRefused {
        name: a.name.clone(),
        uid: a.uid,
        reason,
        origin: policy.source.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acct(name: &str, uid: u32, shell: &str, groups: &[u32]) -> Account {
        Account {
            name: name.into(),
            uid,
            gid: uid,
            home: "/home/x".into(),
            shell: shell.into(),
            groups: groups.to_vec(),
        }
    }

    fn rules() -> Rules {
        Rules {
            min_uid: 1000,
            max_uid: 60000,
            allowed_groups: Vec::new(),
            allowed_users: Vec::new(),
            shells: Some(vec!["/bin/bash".into(), "/bin/sh".into()]),
        }
    }

    #[test]
    fn root_and_system_accounts_are_refused() {
        let r = rules();
        let alice = acct("alice", 1001, "/bin/bash", &[1001]);
        assert_eq!(judge(&r, &alice, 0, true), Ok(()));
        // root, from the system services and from a root daemon of someone else's store.
        let root = acct("root", 0, "/bin/bash", &[0]);
        assert!(judge(&r, &root, 0, true).unwrap_err().contains("root"));
        // Listed by name or not, root is never allowed.
        let mut listed = r.clone();
        listed.allowed_users = vec!["root".into()];
        assert!(judge(&listed, &root, 0, true).is_err());
        // A user's own root daemon runs its jobs as itself (no switch).
        assert_eq!(judge(&r, &root, 0, false), Ok(()));
        // System accounts: low uid, nobody's high uid.
        let daemon = acct("daemon", 1, "/usr/sbin/nologin", &[1]);
        assert!(
            judge(&r, &daemon, 0, true)
                .unwrap_err()
                .contains("system account")
        );
        assert!(judge(&r, &daemon, 0, false).is_err());
        let nobody = acct("nobody", 65534, "/usr/sbin/nologin", &[65534]);
        assert!(
            judge(&r, &nobody, 0, true)
                .unwrap_err()
                .contains("system account")
        );
        // An ordinary uid without a login shell.
        for shell in ["/usr/sbin/nologin", "/bin/false", "", "/opt/evil-shell"] {
            let a = acct("svc", 1500, shell, &[1500]);
            assert!(
                judge(&r, &a, 0, true).unwrap_err().contains("login shell"),
                "{shell}"
            );
        }
        // Listed by name: allowed whatever its range and shell.
        let mut listed = r.clone();
        listed.allowed_users = vec!["nobody".into()];
        assert_eq!(judge(&listed, &nobody, 0, true), Ok(()));
    }

    #[test]
    fn groups_and_ranges_from_the_configuration() {
        let mut r = rules();
        r.allowed_groups = vec![("agents".into(), Some(2000)), ("gone".into(), None)];
        let member = acct("alice", 1001, "/bin/bash", &[1001, 2000]);
        let outsider = acct("bob", 1002, "/bin/bash", &[1002, 27]);
        assert_eq!(judge(&r, &member, 0, true), Ok(()));
        let e = judge(&r, &outsider, 0, true).unwrap_err();
        assert!(
            e.contains("none of the allowed groups (agents, gone)"),
            "{e}"
        );
        r.min_uid = 1002;
        assert!(judge(&r, &member, 0, true).is_err());
    }

    #[test]
    fn login_defs_and_shells() {
        assert_eq!(
            login_defs_range("# x\nUID_MIN\t\t\t 1000\nUID_MAX   60000\nSYS_UID_MIN 100\n"),
            (1000, 60000)
        );
        assert_eq!(login_defs_range("UID_MIN 500\n"), (500, 60000));
        assert_eq!(login_defs_range(""), (1000, 60000));
        assert_eq!(
            shells_list("# /etc/shells\n/bin/sh\n\n/bin/bash\n"),
            vec!["/bin/sh".to_string(), "/bin/bash".to_string()]
        );
    }

    #[test]
    fn refusals_name_the_account_and_the_rule() {
        let e = RunAsRefused {
            name: "root".into(),
            uid: 0,
            reason: "jobs never run as root (uid 0)".into(),
            origin: "/etc/agentstore/config.yaml".into(),
        }
        .to_string();
        assert!(e.contains("Unix user root (uid 0)"), "{e}");
        assert!(e.contains("/etc/agentstore/config.yaml"), "{e}");
    }
}
