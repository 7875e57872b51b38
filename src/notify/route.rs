//! Who hears about a notice, where, and when: the user's `notify` choices (sinks, events,
//! quiet hours) over the machine's defaults. A notice for no one in particular (`user`
//! absent: a lost machine) goes to every admin.

use crate::model::User;
use crate::store::notices::{Notice, NoticeKind};
use crate::store::notify_config::NotifyConfig;

/// One recipient of a notice at one sink.
#[derive(Debug, Clone)]
pub struct Target {
    /// The user.
    pub user: User,
    /// The sink's name.
    pub sink: String,
    /// Seconds until the user's quiet hours end, when they are on now.
    pub quiet_for: Option<i64>,
    /// A reply in the Slack thread the job was asked for in (sink `slack`).
    pub thread: Option<super::ThreadReply>,
}

/// The sinks `user` chose (or the defaults).
pub fn sinks_of(user: &User, cfg: &NotifyConfig) -> Vec<String> {
    user.notify
        .as_ref()
        .and_then(|p| p.sinks.clone())
        .unwrap_or_else(|| cfg.defaults.sinks.clone())
}

/// Whether `user` wants notices of `kind`. A test notice always goes through.
pub fn wants(user: &User, kind: NoticeKind, cfg: &NotifyConfig) -> bool {
    if kind == NoticeKind::Test {
        return true;
    }
    let events = user
        .notify
        .as_ref()
        .and_then(|p| p.events.as_ref())
        .unwrap_or(&cfg.defaults.events);
    events.iter().any(|e| e == kind.name())
}

/// Everyone who should hear of `notice`, at which sinks. `users` are the store's users.
pub fn targets(notice: &Notice, users: &[User], cfg: &NotifyConfig) -> Vec<Target> {
    let now = chrono::Utc::now();
    let chosen: Vec<&User> = match &notice.user {
        Some(id) => users.iter().filter(|u| &u.id == id).collect(),
        None => users.iter().filter(|u| u.is_admin()).collect(),
    };
    let mut out = Vec::new();
    for u in chosen {
        if !wants(u, notice.kind, cfg) {
            continue;
        }
        let quiet_for = u
            .notify
            .as_ref()
            .and_then(|p| p.quiet_hours.as_ref())
            .and_then(|q| q.remaining(now))
            .filter(|_| notice.kind != NoticeKind::Test);
        for sink in sinks_of(u, cfg) {
            out.push(Target {
                user: u.clone(),
                sink,
                quiet_for,
                thread: None,
            });
        }
    }
    out
}
