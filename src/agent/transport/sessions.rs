//! Conversations kept across sessions: one private file per session under
//! `~/.agentshell/sessions/` (mode 0600 in a 0700 folder, replaced atomically after every turn),
//! bounded in size (oldest turns dropped first) and in number (oldest sessions removed).
//!
//! `agentshell --continue` reopens the newest session of the project, `--resume [ID]` and the
//! `/resume` command list the project's sessions and reopen one.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::agent::core::message::{Message, Role};
use crate::agent::private_file::{private_dir, write_private};

/// Largest session file written; older turns are dropped to fit.
pub const MAX_SESSION_BYTES: usize = 4 << 20;
/// Sessions kept per user; the oldest beyond this are removed.
pub const MAX_SESSIONS: usize = 200;
/// Format version written.
const VERSION: u32 = 1;

/// One saved conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionFile {
    /// Format version.
    pub version: u32,
    /// The session id (also the file name without `.json`).
    pub id: String,
    /// The project root it ran in.
    pub root: PathBuf,
    /// The model used last.
    pub model: String,
    /// RFC 3339 creation time.
    pub created: String,
    /// RFC 3339 time of the last save.
    pub updated: String,
    /// The conversation (without the system prompt).
    pub messages: Vec<Message>,
}

impl SessionFile {
    /// The first request, on one line and short, to recognise the session by.
    pub fn title(&self) -> String {
        let first = self
            .messages
            .iter()
            .find(|m| m.role == Role::User && !m.is_marker)
            .map_or("(empty)", |m| m.content.as_str());
        let line: String = first.split_whitespace().collect::<Vec<_>>().join(" ");
        let mut short: String = line.chars().take(60).collect();
        if line.chars().count() > 60 {
            short.push('…');
        }
        crate::agent::tools::display::visible_line(&short)
    }

    /// Requests made by the user in this session.
    pub fn requests(&self) -> usize {
        self.messages
            .iter()
            .filter(|m| m.role == Role::User && !m.is_marker)
            .count()
    }
}

/// A session could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// No session has this id (or number) for this project.
    #[error("no session {0} for this project; /resume lists them")]
    NotFound(String),
    /// The id is not a session id.
    #[error("{0:?} is not a session id")]
    BadId(String),
    /// The file is not a session.
    #[error("{path}: {message}")]
    Bad {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// An I/O error.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// Which path.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// Writing failed.
    #[error(transparent)]
    Write(#[from] crate::agent::private_file::WriteError),
}

/// The sessions folder of one user, seen from one project.
#[derive(Debug, Clone)]
pub struct SessionStore {
    dir: PathBuf,
    root: PathBuf,
}

fn is_session_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

impl SessionStore {
    /// Sessions in `dir` (`~/.agentshell/sessions`) for the project at `root`.
    pub fn new(dir: PathBuf, root: PathBuf) -> Self {
        Self { dir, root }
    }

    /// A new session id: the time (sortable) plus a random suffix.
    pub fn new_id() -> String {
        let uuid = uuid::Uuid::new_v4().simple().to_string();
        format!(
            "{}-{}",
            chrono::Utc::now().format("%Y%m%d-%H%M%S"),
            &uuid[..8]
        )
    }

    fn path(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.json"))
    }

    /// Save `messages` as session `id` (created now if new). Older turns are dropped until
    /// the file fits [`MAX_SESSION_BYTES`]; then the oldest sessions beyond [`MAX_SESSIONS`]
    /// are removed.
    pub fn save(&self, id: &str, model: &str, messages: &[Message]) -> Result<(), SessionError> {
        if !is_session_id(id) {
            return Err(SessionError::BadId(id.to_string()));
        }
        private_dir(&self.dir).map_err(|e| SessionError::Io {
            action: "creating",
            path: self.dir.clone(),
            source: e,
        })?;
        let now = chrono::Utc::now().to_rfc3339();
        let created = self
            .load(id)
            .map(|s| s.created)
            .unwrap_or_else(|_| now.clone());
        let mut file = SessionFile {
            version: VERSION,
            id: id.to_string(),
            root: self.root.clone(),
            model: model.to_string(),
            created,
            updated: now,
            messages: messages.to_vec(),
        };
        let mut text = serde_json::to_string(&file).map_err(|e| SessionError::Bad {
            path: self.path(id),
            message: e.to_string(),
        })?;
        while text.len() > MAX_SESSION_BYTES && !file.messages.is_empty() {
            drop_oldest_turn(&mut file.messages);
            text = serde_json::to_string(&file).map_err(|e| SessionError::Bad {
                path: self.path(id),
                message: e.to_string(),
            })?;
        }
        write_private(&self.path(id), &text)?;
        self.prune();
        Ok(())
    }

    /// Read session `id`.
    pub fn load(&self, id: &str) -> Result<SessionFile, SessionError> {
        if !is_session_id(id) {
            return Err(SessionError::BadId(id.to_string()));
        }
        read_session(&self.path(id))
    }

    /// This project's sessions, newest first, and the files that could not be read (with why).
    pub fn list(&self) -> (Vec<SessionFile>, Vec<String>) {
        let (mut all, problems) = self.all();
        all.retain(|s| s.root == self.root);
        (all, problems)
    }

    fn all(&self) -> (Vec<SessionFile>, Vec<String>) {
        let mut sessions = Vec::new();
        let mut problems = Vec::new();
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return (sessions, problems);
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            match read_session(&path) {
                Ok(s) => sessions.push(s),
                Err(e) => problems.push(e.to_string()),
            }
        }
        sessions.sort_by(|a, b| b.updated.cmp(&a.updated).then(b.id.cmp(&a.id)));
        (sessions, problems)
    }

    /// Find a session by id, or by its number in [`SessionStore::list`] (1 = newest).
    pub fn find(&self, key: &str) -> Result<SessionFile, SessionError> {
        let (list, _) = self.list();
        if let Ok(n) = key.parse::<usize>()
            && n >= 1
            && n <= list.len()
            && key.len() < 6
        {
            return Ok(list[n - 1].clone());
        }
        list.into_iter()
            .find(|s| s.id == key)
            .ok_or_else(|| SessionError::NotFound(crate::agent::tools::display::visible_line(key)))
    }

    /// The newest session of this project.
    pub fn latest(&self) -> Option<SessionFile> {
        self.list().0.into_iter().next()
    }

    fn prune(&self) {
        let (all, _) = self.all();
        for old in all.iter().skip(MAX_SESSIONS) {
            let _ = std::fs::remove_file(self.path(&old.id));
        }
    }
}

/// Drop the oldest turn: the first message and everything up to the next user request.
fn drop_oldest_turn(messages: &mut Vec<Message>) {
    let next = messages
        .iter()
        .skip(1)
        .position(|m| m.role == Role::User)
        .map_or(messages.len(), |p| p + 1);
    messages.drain(..next);
}

fn read_session(path: &Path) -> Result<SessionFile, SessionError> {
    use std::io::Read;
    let f = std::fs::File::open(path).map_err(|e| SessionError::Io {
        action: "reading",
        path: path.to_path_buf(),
        source: e,
    })?;
    let mut bytes = Vec::new();
    f.take(MAX_SESSION_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| SessionError::Io {
            action: "reading",
            path: path.to_path_buf(),
            source: e,
        })?;
    if bytes.len() > MAX_SESSION_BYTES {
        return Err(SessionError::Bad {
            path: path.to_path_buf(),
            message: format!("larger than {MAX_SESSION_BYTES} bytes"),
        });
    }
    let file: SessionFile = serde_json::from_slice(&bytes).map_err(|e| SessionError::Bad {
        path: path.to_path_buf(),
        message: format!("not a session file: {e}"),
    })?;
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    if file.id != stem || file.version != VERSION {
        return Err(SessionError::Bad {
            path: path.to_path_buf(),
            message: format!(
                "id {:?} / version {} do not match the file",
                file.id, file.version
            ),
        });
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn save_load_list_and_bounds() {
        let dir = tempfile::tempdir().unwrap();
        let store = SessionStore::new(dir.path().join("sessions"), "/p".into());
        let other = SessionStore::new(dir.path().join("sessions"), "/q".into());
        let msgs = vec![
            Message::user("first question"),
            Message::assistant("answer", vec![]),
        ];
        store.save("s1", "m", &msgs).unwrap();
        other.save("s2", "m", &msgs).unwrap();
        let meta = std::fs::metadata(dir.path().join("sessions/s1.json")).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        let dmeta = std::fs::metadata(dir.path().join("sessions")).unwrap();
        assert_eq!(dmeta.permissions().mode() & 0o777, 0o700);
        assert_eq!(store.load("s1").unwrap().messages, msgs);
        let (list, problems) = store.list();
        assert_eq!(list.len(), 1, "only this project's sessions");
        assert!(problems.is_empty());
        assert_eq!(store.find("1").unwrap().id, "s1");
        assert!(store.find("s2").is_err());
        assert!(matches!(store.load("../x"), Err(SessionError::BadId(_))));

        // a bad file is reported with its path, and the others still list
        std::fs::write(dir.path().join("sessions/bad.json"), "{").unwrap();
        let (list, problems) = store.list();
        assert_eq!(list.len(), 1);
        assert!(problems[0].contains("bad.json"), "{problems:?}");

        // too big: oldest turns go first, the newest stays
        let big = "x".repeat(MAX_SESSION_BYTES / 3);
        let many: Vec<Message> = (0..6)
            .flat_map(|i| {
                [
                    Message::user(format!("q{i}")),
                    Message::assistant(big.clone(), vec![]),
                ]
            })
            .collect();
        store.save("s3", "m", &many).unwrap();
        let kept = store.load("s3").unwrap().messages;
        assert!(kept.len() < many.len() && !kept.is_empty());
        assert_eq!(kept[0].role, Role::User);
        assert_eq!(kept[kept.len() - 2].content, "q5");
        assert!(
            std::fs::metadata(dir.path().join("sessions/s3.json"))
                .unwrap()
                .len()
                <= MAX_SESSION_BYTES as u64
        );
    }
}
