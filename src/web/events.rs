//! What the D-Bus signals say, as server-sent events: `MessageProcessed`, `JobCreated` and
//! `MachineStateChanged` from the orchestrator, `JobStateChanged`, `ApprovalRequested`,
//! `ApprovalAnswered` and the queue properties (`PropertiesChanged`) from every queue
//! manager. One subscription on the bus, fanned out to every open stream.
//!
//! Each event is `event: <SignalName>` and a JSON `data:` line with the signal's arguments
//! by their D-Bus names plus `path` (the sending object).

use futures_util::StreamExt;
use serde_json::{Map, Value, json};
use tokio::sync::broadcast;

/// The fan-out of signal events.
#[derive(Debug, Clone)]
pub struct Hub {
    tx: broadcast::Sender<(String, String)>,
}

impl Hub {
    /// Subscribes on `conn` and starts forwarding.
    pub async fn start(conn: &zbus::Connection) -> zbus::Result<Hub> {
        let (tx, _) = broadcast::channel(1024);
        let rules = [
            zbus::MatchRule::builder()
                .msg_type(zbus::message::Type::Signal)
                .interface(crate::bus::ORCHESTRATOR_INTERFACE)
                .build()?,
            zbus::MatchRule::builder()
                .msg_type(zbus::message::Type::Signal)
                .interface(crate::bus::QUEUE_INTERFACE)
                .build()?,
            zbus::MatchRule::builder()
                .msg_type(zbus::message::Type::Signal)
                .interface("org.freedesktop.DBus.Properties")
                .member("PropertiesChanged")
                .path_namespace("/org/agentstore/Queue")
                .build()?,
        ];
        for rule in rules {
            let mut stream =
                zbus::MessageStream::for_match_rule(rule, conn, std::num::NonZeroUsize::new(1024))
                    .await?;
            let tx = tx.clone();
            tokio::spawn(async move {
                while let Some(msg) = stream.next().await {
                    let Ok(msg) = msg else { continue };
                    if let Some(ev) = describe(&msg) {
                        let _ = tx.send(ev);
                    }
                }
            });
        }
        watch_every_queue(conn).await;
        Ok(Hub { tx })
    }

    /// A new subscriber.
    pub fn subscribe(&self) -> broadcast::Receiver<(String, String)> {
        self.tx.subscribe()
    }
}

fn value_json(v: &zbus::Variant<'_>) -> Value {
    use zbus::Variant as V;
    match v {
        V::U32(n) => json!(n),
        V::U64(n) => json!(n),
        V::I32(n) => json!(n),
        V::Bool(b) => json!(b),
        V::Str(s) => json!(s.as_str()),
        other => json!(other.to_string()),
    }
}

/// The event name and JSON data of one signal (`None` for one this stream does not carry).
fn describe(msg: &zbus::Message) -> Option<(String, String)> {
    let hdr = msg.header();
    let member = hdr.member()?.to_string();
    let path = hdr.path().map(|p| p.to_string()).unwrap_or_default();
    let body = msg.body();
    let mut data = Map::new();
    data.insert("path".into(), json!(path));
    match member.as_str() {
        "MessageProcessed" => {
            let (cid,): (String,) = body.deserialize().ok()?;
            data.insert("correlation_id".into(), json!(cid));
        }
        "JobCreated" => {
            let (job, queue): (String, String) = body.deserialize().ok()?;
            data.insert("job_id".into(), json!(job));
            data.insert("queue".into(), json!(queue));
        }
        "JobStateChanged" => {
            let (id, old, new): (String, String, String) = body.deserialize().ok()?;
            data.insert("id".into(), json!(id));
            data.insert("old".into(), json!(old));
            data.insert("new".into(), json!(new));
        }
        "ApprovalRequested" => {
            let (job, req, deadline): (String, String, String) = body.deserialize().ok()?;
            data.insert("job_id".into(), json!(job));
            data.insert("request_id".into(), json!(req));
            data.insert("deadline".into(), json!(deadline));
        }
        "ApprovalAnswered" => {
            let (job, req): (String, String) = body.deserialize().ok()?;
            data.insert("job_id".into(), json!(job));
            data.insert("request_id".into(), json!(req));
        }
        "MachineStateChanged" => {
            let (host, stale, last_seen): (String, bool, String) = body.deserialize().ok()?;
            data.insert("host".into(), json!(host));
            data.insert("stale".into(), json!(stale));
            data.insert("last_seen".into(), json!(last_seen));
        }
        "PropertiesChanged" => {
            let (iface, changed, _): (
                String,
                std::collections::HashMap<String, zbus::Variant<'_>>,
                Vec<String>,
            ) = body.deserialize().ok()?;
            if iface != crate::bus::QUEUE_INTERFACE {
                return None;
            }
            let mut props = Map::new();
            for (k, v) in &changed {
                props.insert(k.clone(), value_json(v));
            }
            data.insert("changed".into(), Value::Object(props));
        }
        _ => return None,
    }
    Some((member, Value::Object(data).to_string()))
}

/// Asks every queue manager on the bus, now and each one that takes its name later, to send
/// this connection its `JobStateChanged` (never broadcast: issue 27). Each event is then
/// passed on only to a caller `view-job` shows the job.
async fn watch_every_queue(conn: &zbus::Connection) {
    let prefix = crate::bus::queue_bus_name("");
    let Ok(dbus) = zbus::fdo::DBusProxy::new(conn).await else {
        return;
    };
    // Subscribed before listing, so a manager starting in between is not missed.
    let owners = dbus.receive_name_owner_changed().await;
    if let Ok(names) = dbus.list_names().await {
        for n in names {
            if n.as_str().starts_with(&prefix) {
                watch(conn, n.as_str(), false).await;
            }
        }
    }
    let Ok(mut owners) = owners else { return };
    let conn = conn.clone();
    tokio::spawn(async move {
        while let Some(sig) = owners.next().await {
            let Ok(a) = sig.args() else { continue };
            // Everything a manager that starts now did is new to the stream: replayed, so the
            // moves it makes before this call arrives are not lost.
            if a.name().as_str().starts_with(&prefix) && a.new_owner().is_some() {
                watch(&conn, a.name().as_str(), true).await;
            }
        }
    });
}

async fn watch(conn: &zbus::Connection, name: &str, replay: bool) {
    let r = conn
        .call_method(
            Some(name),
            crate::bus::queue_object_path(&name[crate::bus::queue_bus_name("").len()..]).as_str(),
            Some(crate::bus::QUEUE_INTERFACE),
            "WatchJobs",
            &(replay,),
        )
        .await;
    if let Err(e) = r {
        tracing::warn!("{name}: WatchJobs: {e} (its jobs' moves are not in the event stream)");
    }
}
