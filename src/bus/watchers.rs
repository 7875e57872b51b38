//! Who hears `org.agentstore.Queue1.JobStateChanged` (issue 27, DESIGN §9 "every reader is
//! authorized"). A broadcast signal reaches every connection on the bus that adds a match
//! rule — any local account — so the signal is not broadcast: it is sent to each connection
//! that asked with `WatchJobs` (a unicast signal, which the bus delivers to its destination
//! only), and to each only for the jobs PRD §10 lets that caller see (`view-job`). Before, any
//! local user could follow when every private job of every user was queued, started,
//! finished or failed.
//!
//! A watcher that asks with `replay` first gets the changes the manager made since it started
//! (the last [`BACKLOG`]), in order, before any newer one: a client that subscribes before the
//! manager owns its name loses nothing. Watchers are bounded per account ([`PER_UID`], the
//! oldest of that account gives way) and in all ([`TOTAL`]); a watcher is forgotten when its
//! connection leaves the bus.

use crate::permissions::{Caller, sees_job};
use crate::store::Store;
use std::collections::VecDeque;
use std::sync::Arc;
use zbus::names::{BusName, OwnedUniqueName};
use zbus::object_server::SignalEmitter;

/// Changes kept for a watcher that asks for them.
pub const BACKLOG: usize = 1024;
/// Watching connections of one Unix account.
pub const PER_UID: usize = 16;
/// Watching connections in all.
pub const TOTAL: usize = 256;

/// One job move.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The job.
    pub id: String,
    /// Its state before (`queued`, `running`, `finished`, `failed`).
    pub old: String,
    /// Its state now.
    pub new: String,
}

#[derive(Debug)]
struct Watcher {
    name: OwnedUniqueName,
    uid: u32,
    caller: Caller,
}

#[derive(Debug, Default)]
struct State {
    watchers: Vec<Watcher>,
    backlog: VecDeque<Change>,
}

/// The watchers of one queue manager and its recent changes.
#[derive(Debug)]
pub struct Watchers {
    store: Arc<Store>,
    /// Held while sending, so each watcher gets the changes in the order they happened.
    state: tokio::sync::Mutex<State>,
}

impl Watchers {
    /// No watcher yet.
    pub fn new(store: Arc<Store>) -> Watchers {
        Watchers {
            store,
            state: tokio::sync::Mutex::new(State::default()),
        }
    }

    /// Whether `caller` may hear of job `id`: trusted callers and admins of every job, a user
    /// of the jobs `view-job` shows them.
    fn may_hear(&self, caller: &Caller, id: &str) -> bool {
        caller.is_admin() || sees_job(&self.store, caller, id)
    }

    /// Adds (or renews) connection `name` of account `uid` as `caller`; with `replay`, sends it
    /// the changes kept so far that it may hear of.
    pub async fn watch(
        &self,
        emitter: &SignalEmitter<'_>,
        name: OwnedUniqueName,
        uid: u32,
        caller: Caller,
        replay: bool,
    ) -> Result<(), String> {
        let mut st = self.state.lock().await;
        // Asked again by a connection that watches already: renewed, nothing sent twice.
        let again = st.watchers.iter().any(|w| w.name == name);
        st.watchers.retain(|w| w.name != name);
        let of_uid = st.watchers.iter().filter(|w| w.uid == uid).count();
        if of_uid >= PER_UID {
            // The account's oldest watcher gives way (it is most likely gone).
            if let Some(i) = st.watchers.iter().position(|w| w.uid == uid) {
                st.watchers.remove(i);
            }
        } else if st.watchers.len() >= TOTAL {
            return Err(format!(
                "this queue manager has {TOTAL} watchers already; try again later"
            ));
        }
        if replay && !again {
            for c in &st.backlog {
                if self.may_hear(&caller, &c.id) {
                    send(emitter, &name, c).await;
                }
            }
        }
        st.watchers.push(Watcher { name, uid, caller });
        Ok(())
    }

    /// Connection `name` left the bus.
    pub async fn forget(&self, name: &str) {
        self.state
            .lock()
            .await
            .watchers
            .retain(|w| w.name.as_str() != name);
    }

    /// A job moved: kept, and sent to every watcher that may hear of it.
    pub async fn changed(&self, emitter: &SignalEmitter<'_>, change: Change) {
        let mut st = self.state.lock().await;
        if st.backlog.len() >= BACKLOG {
            st.backlog.pop_front();
        }
        st.backlog.push_back(change.clone());
        for w in &st.watchers {
            if self.may_hear(&w.caller, &change.id) {
                send(emitter, &w.name, &change).await;
            }
        }
    }

    /// How many connections watch now.
    pub async fn count(&self) -> usize {
        self.state.lock().await.watchers.len()
    }
}

async fn send(emitter: &SignalEmitter<'_>, to: &OwnedUniqueName, c: &Change) {
    let e = emitter
        .clone()
        .set_destination(BusName::Unique(to.as_ref().to_owned()));
    if let Err(err) = super::queue::QueueObject::job_state_changed(&e, &c.id, &c.old, &c.new).await
    {
        tracing::debug!("JobStateChanged to {to}: {err}");
    }
}

/// Forgets each watcher of `watchers` whose connection leaves the bus `conn`, until the task
/// returned is aborted (it holds the connection, and with it the manager's bus name).
pub fn forget_when_gone(
    conn: &zbus::Connection,
    watchers: Arc<Watchers>,
) -> tokio::task::JoinHandle<()> {
    use futures_util::StreamExt;
    let conn = conn.clone();
    tokio::spawn(async move {
        let Ok(dbus) = zbus::fdo::DBusProxy::new(&conn).await else {
            return;
        };
        let Ok(mut stream) = dbus.receive_name_owner_changed().await else {
            return;
        };
        while let Some(sig) = stream.next().await {
            let Ok(a) = sig.args() else { continue };
            if a.new_owner().is_none() && a.name().as_str().starts_with(':') {
                watchers.forget(a.name().as_str()).await;
            }
        }
    })
}
