//! PRD §10 permission rules, shared by the CLI's direct reads and the daemons' D-Bus calls.
//!
//! `admin` may do everything. `user` may not list or view other users, and sees only the
//! projects it owns or collaborates on, and the PRDs and jobs of those projects.

use crate::model::{Job, Prd, Project, User};
use crate::store::{Store, StoreError};

/// Who is asking.
#[derive(Debug, Clone)]
pub enum Caller {
    /// Unrestricted: a local caller reading files it can read anyway, or root.
    Trusted,
    /// A known user from `users/`.
    User(User),
}

impl Caller {
    /// True for admins and trusted callers.
    pub fn is_admin(&self) -> bool {
        match self {
            Caller::Trusted => true,
            Caller::User(u) => u.is_admin(),
        }
    }

    /// The user id, if any.
    pub fn user_id(&self) -> Option<&str> {
        match self {
            Caller::Trusted => None,
            Caller::User(u) => Some(&u.id),
        }
    }

    /// What only admins may do (`denied` names it): pausing and resuming a queue, a sweep,
    /// archiving, migrating, listing users.
    pub fn require_admin(&self, denied: Denied) -> Result<(), Denied> {
        if self.is_admin() { Ok(()) } else { Err(denied) }
    }

    /// Reading a message (a request or its answer): admins, and the user it is from.
    pub fn can_see_message(&self, from: Option<&str>) -> bool {
        self.is_admin() || (self.user_id().is_some() && self.user_id() == from)
    }

    /// Seeing the store's problems found by a listing (unreadable files of other users):
    /// admins only.
    pub fn can_see_store_problems(&self) -> bool {
        self.is_admin()
    }

    /// `list-users`.
    pub fn can_list_users(&self) -> bool {
        self.is_admin()
    }

    /// `view-user ID`: admins, and a user viewing themself.
    pub fn can_view_user(&self, id: &str) -> bool {
        self.is_admin() || self.user_id() == Some(id)
    }

    /// Changing user `id`'s notification choices (`set-user --notify-…`), and seeing what was
    /// sent to them (`notifications`): admins, and a user for themself.
    pub fn can_manage_notices_of(&self, id: &str) -> bool {
        self.is_admin() || self.user_id() == Some(id)
    }

    /// Reading a project.
    pub fn can_see_project(&self, p: &Project) -> bool {
        match self.user_id() {
            _ if self.is_admin() => true,
            Some(me) => p.owner == me || p.collaborators.iter().any(|c| c == me),
            None => false,
        }
    }

    /// Changing a project (and creating jobs for it): owner only, or admins.
    pub fn can_modify_project(&self, p: &Project) -> bool {
        self.is_admin() || self.user_id() == Some(p.owner.as_str())
    }

    /// Reading a PRD: its owner, or whoever may see its project.
    pub fn can_see_prd(&self, prd: &Prd, project: Option<&Project>) -> bool {
        self.is_admin()
            || self.user_id() == Some(prd.owner.as_str())
            || project.is_some_and(|p| self.can_see_project(p))
    }

    /// Reading a job: whoever asked for it, or whoever may see its project.
    pub fn can_see_job(&self, job: &Job, project: Option<&Project>) -> bool {
        self.is_admin()
            || (self.user_id().is_some() && self.user_id() == job.config.user.as_deref())
            || project.is_some_and(|p| self.can_see_project(p))
    }

    /// Reading a job whose document may not be readable (`None`: admins only). Approval
    /// requests of a running job are read by the same rule (DESIGN §9: every reader).
    pub fn can_see_job_opt(&self, job: Option<&Job>, project: Option<&Project>) -> bool {
        self.is_admin() || job.is_some_and(|j| self.can_see_job(j, project))
    }

    /// Answering an approval request of a running job: the rule of a cancel.
    pub fn can_answer_request(&self, job: Option<&Job>, project: Option<&Project>) -> bool {
        self.can_cancel_job(job, project)
    }

    /// Changing a task of `p` (retry-task, cancel-task, set-task; issue 30): whoever may
    /// change its project (its owner), or admins. Whoever may only see it may not.
    pub fn can_change_task(&self, p: &Project) -> bool {
        self.can_modify_project(p)
    }

    /// Cancelling a job: admins, whoever asked for it, or whoever may change its project
    /// (`job` is `None` when its document cannot be read: admins only).
    pub fn can_cancel_job(&self, job: Option<&Job>, project: Option<&Project>) -> bool {
        self.is_admin()
            || job.is_some_and(|j| {
                self.user_id().is_some() && self.user_id() == j.config.user.as_deref()
                    || project.is_some_and(|p| self.can_modify_project(p))
            })
    }
}

/// Who may see a listed job by what the index holds of it (PRD §10: admins, the job's own
/// user, whoever may see its project), each project read once per listing.
pub struct Visibility<'a> {
    store: &'a Store,
    who: &'a Caller,
    projects: std::collections::HashMap<String, Option<Project>>,
}

impl<'a> Visibility<'a> {
    /// For `who` listing `store`.
    pub fn new(store: &'a Store, who: &'a Caller) -> Visibility<'a> {
        Visibility {
            store,
            who,
            projects: Default::default(),
        }
    }

    /// What this listing's answers depended on: whether the caller is an admin, and each
    /// project looked at with whether the caller may see it.
    pub fn rights(&self) -> Vec<(String, bool)> {
        let mut out = vec![(String::new(), self.who.is_admin())];
        for (name, p) in &self.projects {
            out.push((
                name.clone(),
                p.as_ref().is_some_and(|p| self.who.can_see_project(p)),
            ));
        }
        out.sort();
        out
    }

    /// True when [`Visibility::rights`] would still answer `rights` (each project read again).
    pub fn same_rights(&mut self, rights: &[(String, bool)]) -> bool {
        self.projects.clear();
        let admin = self.who.is_admin();
        rights.iter().all(|(name, seen)| {
            if name.is_empty() {
                return *seen == admin;
            }
            let p = self.store.project(name).ok();
            let now = p.as_ref().is_some_and(|p| self.who.can_see_project(p));
            self.projects.insert(name.clone(), p);
            now == *seen
        })
    }

    /// The document of listed job `l` if the caller may see it (`Ok(None)`: deleted since
    /// it was indexed, or not the caller's to see), its id filled in: from the
    /// documents cache beside the index when it holds the job, else read from the store. The
    /// index is a cache: when the document names another project or user than the index
    /// did, the document decides. `l` must be one [`Visibility::admits`] let through.
    pub fn document(
        &mut self,
        l: &crate::store::listing::Listed,
    ) -> Result<Option<Job>, StoreError> {
        let cached = l
            .doc
            .as_deref()
            .and_then(|d| serde_json::from_slice::<Job>(d).ok());
        let mut job = match cached {
            Some(job) => job,
            None => match crate::store::listing::read_listed(self.store, l)? {
                Some((_, job)) => job,
                None => return Ok(None),
            },
        };
        if !self.admits_document(l, &job) {
            return Ok(None);
        }
        job.id.get_or_insert_with(|| l.id.to_string());
        Ok(Some(job))
    }

    /// True when `job`, listed as `l` (and let through by [`Visibility::admits`]), may be
    /// shown: the index is a cache, so when the document names another project or user than
    /// the index did, the document decides.
    pub fn admits_document(&mut self, l: &crate::store::listing::Listed, job: &Job) -> bool {
        (job.config.project == l.head.project
            && job.config.user.as_deref() == l.head.user.as_deref())
            || self.admits(&job.config.project, job.config.user.as_deref())
    }

    /// True when the job of `project` (queued by `user`) may be listed.
    pub fn admits(&mut self, project: &str, user: Option<&str>) -> bool {
        let who = self.who;
        if who.is_admin() || (who.user_id().is_some() && who.user_id() == user) {
            return true;
        }
        let store = self.store;
        self.projects
            .entry(project.to_string())
            .or_insert_with(|| store.project(project).ok())
            .as_ref()
            .is_some_and(|p| who.can_see_project(p))
    }
}

/// Why a PRD §10 question was answered no, or could not be asked: each front door turns it
/// into its own error (`RouteError`, `BusError`, `CliError`) and nothing else decides.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// No such document (or it cannot be read) — and a job the caller may not see, in the
    /// very words of an unknown one ([`job_hidden`]).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The caller may not: the words of the refusal.
    #[error("{0}")]
    Denied(String),
}

impl From<Denied> for Refused {
    fn from(d: Denied) -> Refused {
        Refused::Denied(d.to_string())
    }
}

/// Why `who` may not see project `p` (`view-project`'s words).
pub fn project_denied(p: &Project) -> String {
    format!("project {} belongs to {}", p.id, p.owner)
}

/// Project `id`, for a caller who may see it (`view-project`, `set-project`) — and a listing
/// narrowed to it (`list-prds --project`, `list-jobs --project`): the project must exist and
/// be one `who` may see, refused as `view-project` refuses it — never answered with an empty
/// list, which would say less than the truth to its owner and tell a stranger nothing a
/// refusal does not.
pub fn visible_project(store: &Store, who: &Caller, id: &str) -> Result<Project, Refused> {
    let p = store.project(id)?;
    if !who.can_see_project(&p) {
        return Err(Refused::Denied(project_denied(&p)));
    }
    Ok(p)
}

/// A job listing's filter, checked before anything is listed: a project named must be one
/// `who` may see ([`visible_project`]), a queue named must exist.
pub fn check_job_filter(
    store: &Store,
    who: &Caller,
    filter: &crate::store::listing::JobFilter,
) -> Result<(), Refused> {
    if let Some(p) = &filter.project {
        visible_project(store, who, p)?;
    }
    if let Some(q) = &filter.queue {
        store.queue(q)?;
    }
    Ok(())
}

/// Project `id` for a new job of `who` (PRD §10: collaborators may see a project, only its
/// owner or an admin creates jobs for it).
pub fn project_for_new_job(store: &Store, who: &Caller, id: &str) -> Result<Project, Refused> {
    let p = visible_project(store, who, id)?;
    if !who.can_modify_project(&p) {
        return Err(Refused::Denied(format!(
            "only the owner of project {} or an admin can create jobs for it (collaborators can only see it)",
            p.id
        )));
    }
    Ok(p)
}

/// Project `id` for `who` to change (`edit-project`; PRD §10: its owner or an admin; a
/// collaborator may only see it, a stranger is refused as `view-project` refuses them).
pub fn project_to_change(store: &Store, who: &Caller, id: &str) -> Result<Project, Refused> {
    let p = visible_project(store, who, id)?;
    if !who.can_modify_project(&p) {
        return Err(Refused::Denied(format!(
            "only the owner of project {} ({}) or an admin can change it (collaborators can only see it)",
            p.id, p.owner
        )));
    }
    Ok(p)
}

/// PRD `id` (found in any project), for a caller who may see it (`view-prd`).
pub fn visible_prd(store: &Store, who: &Caller, id: &str) -> Result<Prd, Refused> {
    let (_, _, prd) = store.find_prd(id)?;
    let project = store.project(&prd.project).ok();
    if !who.can_see_prd(&prd, project.as_ref()) {
        return Err(Refused::Denied(format!(
            "PRD {id} belongs to {}",
            prd.owner
        )));
    }
    Ok(prd)
}

/// User `id`, for a caller who may view them (`view-user`: admins, and a user themself).
pub fn visible_user(store: &Store, who: &Caller, id: &str) -> Result<User, Refused> {
    if !who.can_view_user(id) {
        return Err(Refused::Denied(
            Denied::ViewUser(id.to_string()).to_string(),
        ));
    }
    Ok(store.user(id)?)
}

/// Every user, for a caller who may list them (`list-users`: admins).
pub fn visible_users(
    store: &Store,
    who: &Caller,
    on_error: &mut dyn FnMut(StoreError),
) -> Result<Vec<User>, Refused> {
    who.require_admin(Denied::ListUsers)?;
    Ok(store.users(on_error)?)
}

/// Job `id` (its place and document, its id filled in), for a caller who may see it
/// (`view-job`); one the caller may not see is answered as an unknown one ([`job_hidden`]).
pub fn visible_job(
    store: &Store,
    who: &Caller,
    id: &str,
) -> Result<(crate::store::JobLocation, Job), Refused> {
    let loc = store.find_job(id)?;
    let mut job = store.job(&loc)?;
    let project = store.project(&job.config.project).ok();
    if !who.can_see_job(&job, project.as_ref()) {
        return Err(job_hidden(id).into());
    }
    job.id.get_or_insert_with(|| loc.id.clone());
    Ok((loc, job))
}

/// True when job `id` exists and `who` may see it (PRD §10); an unknown id and another
/// user's private job both answer false, so no id can be probed. A job whose document
/// cannot be read is for admins only.
pub fn sees_job(store: &Store, who: &Caller, id: &str) -> bool {
    let Ok(loc) = store.find_job(id) else {
        return false;
    };
    if who.is_admin() {
        return true;
    }
    let Ok(job) = store.job(&loc) else {
        return false;
    };
    let project = store.project(&job.config.project).ok();
    who.can_see_job(&job, project.as_ref())
}

/// The answer to a job `id` the caller may not see: the very error an unknown id gets
/// (`job not found: ID`), so that whether a private job exists cannot be probed. (A caller
/// who may see a job but not change it is refused: they know it exists.)
pub fn job_hidden(id: &str) -> StoreError {
    StoreError::NotFound {
        kind: "job",
        id: id.to_string(),
    }
}

/// The answer for a job id that names no job the caller may see (unknown, or private to
/// another user: the same words, see [`sees_job`]).
pub fn unknown_job(id: &str) -> String {
    format!("unknown job {id} (no job of that id that you may see)")
}

/// The answer to a request id that is not waiting — and to one of a job the caller may not
/// see, so that an id cannot be probed.
pub fn no_such_request(request_id: &str, queue: &str) -> String {
    format!(
        "approval request {request_id} is not waiting in queue {queue} (answered, past its deadline, or its job ended)"
    )
}

/// Why a caller who may see a job may still not answer its requests.
pub fn may_not_answer(job_id: &str) -> String {
    format!(
        "job {job_id} belongs to another user's project: only its submitter, the project's owner and admins may answer its requests"
    )
}

/// A PRD §10 refusal, its words written here once for every front door (the CLI's direct
/// reads, D-Bus, the web): the callers wrap its text in their own permission-denied error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Denied {
    /// `list-users` by a non-admin.
    #[error("only admins can list users")]
    ListUsers,
    /// `view-user` of someone else by a non-admin.
    #[error("only admins can view other users ({0})")]
    ViewUser(String),
    /// Listing another user's messages by a non-admin.
    #[error("only admins can list other users' messages ({0})")]
    ListMessagesOf(String),
    /// Viewing a message of another user.
    #[error("message {0} belongs to another user")]
    Message(String),
    /// Cancelling a job of a project the caller may not change.
    #[error("job {0} belongs to another user's project")]
    CancelJob(String),
    /// Retrying, cancelling or editing a task of a project the caller may not change.
    #[error("task {0} belongs to {1}'s project {2}; only its owner or an admin may change it")]
    ChangeTask(String, String, String),
    /// Pausing a queue by a non-admin.
    #[error("only admins can pause a queue")]
    PauseQueue,
    /// Resuming a queue by a non-admin.
    #[error("only admins can resume a queue")]
    ResumeQueue,
    /// `Sweep` by a non-admin.
    #[error("only admins can sweep")]
    Sweep,
    /// `archive` by a non-admin.
    #[error("only an admin can archive jobs")]
    Archive,
    /// `migrate` by a non-admin.
    #[error("only an admin can migrate the store")]
    Migrate,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Permission;

    fn user(id: &str, p: Permission) -> Caller {
        Caller::User(User {
            id: id.into(),
            slack_username: None,
            name: id.into(),
            email: format!("{id}@x"),
            permissions: p,
            unix_user: None,
            notify: None,
        })
    }

    fn project(owner: &str, collab: &[&str]) -> Project {
        serde_json::from_value(serde_json::json!({
            "id": "P", "directory": "/tmp", "create_time": "2025-10-25T10:00:00Z",
            "update_time": "2025-10-25T10:00:00Z", "owner": owner,
            "collaborators": collab, "default_queue": "poplar"
        }))
        .unwrap()
    }

    #[test]
    fn prd_section_10_table() {
        let admin = user("root", Permission::Admin);
        let alice = user("alice", Permission::User);
        let mine = project("alice", &[]);
        let theirs = project("bob", &[]);
        let shared = project("bob", &["alice"]);
        assert!(admin.can_list_users() && admin.can_see_project(&theirs));
        assert!(!alice.can_list_users());
        assert!(alice.can_view_user("alice") && !alice.can_view_user("bob"));
        assert!(alice.can_see_project(&mine) && !alice.can_see_project(&theirs));
        assert!(alice.can_see_project(&shared) && !alice.can_modify_project(&shared));
        assert!(Caller::Trusted.can_list_users());
    }
}

/// Why the owner of a job's project could not be told.
#[derive(Debug, thiserror::Error)]
#[error("cannot choose the Unix user for project {project}: {reason}")]
pub struct OwnerError {
    /// Project id.
    pub project: String,
    /// Cause.
    pub reason: String,
}

/// The Unix login name a job of `job`'s project runs as when the queue manager is root
/// (DESIGN §6, §8): the project owner's `unix_user`, else the owner's id.
pub fn project_owner_login(store: &Store, job: &Job) -> Result<String, OwnerError> {
    let failed = |reason: String| OwnerError {
        project: job.config.project.clone(),
        reason,
    };
    let project = store
        .project(&job.config.project)
        .map_err(|e| failed(e.to_string()))?;
    match store.user(&project.owner) {
        Ok(user) => Ok(user.unix_name().to_string()),
        // No user document: the owner id is the login name (PRD ids are user names).
        Err(StoreError::NotFound { .. }) => Ok(project.owner),
        Err(e) => Err(failed(e.to_string())),
    }
}
