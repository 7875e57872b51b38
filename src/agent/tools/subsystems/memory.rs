//! Memory — notes, not a database.
//!
//! `.agentshell/MEMORY.md` is the index, one line per note, always in the system prompt.
//! Long-form notes live in `.agentshell/memory/<name>.md` and are read on demand.

use std::path::{Path, PathBuf};

use thiserror::Error;

/// A memory operation failed.
#[derive(Debug, Error)]
pub enum MemoryError {
    /// The note name is not `[A-Za-z0-9][A-Za-z0-9._-]*` (max 100) or contains `..`.
    #[error("invalid note name `{0}`: use letters, digits, '.', '_' or '-'")]
    InvalidName(String),
    /// No note with that name.
    #[error("no note named `{0}`")]
    NotFound(String),
    /// Reading or writing the files failed.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// Which file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// One search hit: a note and a matching line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchHit {
    /// Note name.
    pub note: String,
    /// 1-based line number.
    pub line: usize,
    /// The line's text.
    pub text: String,
}

/// The notes of one project (`<root>/.agentshell`).
#[derive(Debug, Clone)]
pub struct Memory {
    dir: PathBuf,
}

impl Memory {
    /// Memory stored under `agent_dir` (the project's `.agentshell` directory).
    pub fn new(agent_dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: agent_dir.into(),
        }
    }

    fn index_path(&self) -> PathBuf {
        self.dir.join("MEMORY.md")
    }

    fn notes_dir(&self) -> PathBuf {
        self.dir.join("memory")
    }

    fn note_path(&self, name: &str) -> Result<PathBuf, MemoryError> {
        let valid = !name.is_empty()
            && name.len() <= 100
            && !name.contains("..")
            && name
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphanumeric())
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
        if !valid {
            return Err(MemoryError::InvalidName(name.to_string()));
        }
        let file = if name.ends_with(".md") {
            name.to_string()
        } else {
            format!("{name}.md")
        };
        Ok(self.notes_dir().join(file))
    }

    /// The index text (empty when there is none yet).
    pub fn index(&self) -> String {
        std::fs::read_to_string(self.index_path()).unwrap_or_default()
    }

    /// Read a note.
    pub fn read(&self, name: &str) -> Result<String, MemoryError> {
        let path = self.note_path(name)?;
        std::fs::read_to_string(&path).map_err(|source| {
            if source.kind() == std::io::ErrorKind::NotFound {
                MemoryError::NotFound(name.to_string())
            } else {
                MemoryError::Io {
                    action: "reading",
                    path,
                    source,
                }
            }
        })
    }

    /// Write (create or replace) a note and put its one-line summary in the index.
    pub fn write(&self, name: &str, summary: &str, content: &str) -> Result<PathBuf, MemoryError> {
        let path = self.note_path(name)?;
        let stem = name.trim_end_matches(".md");
        let io = |action, path: &Path| {
            let path = path.to_path_buf();
            move |source| MemoryError::Io {
                action,
                path,
                source,
            }
        };
        std::fs::create_dir_all(self.notes_dir()).map_err(io("creating", &self.notes_dir()))?;
        write_note(&path, content)?;

        let summary = summary.lines().next().unwrap_or("").trim();
        let entry = format!("- [{stem}](memory/{stem}.md) — {summary}");
        let prefix = format!("- [{stem}](");
        let index = self.index();
        let mut lines: Vec<String> = Vec::new();
        let mut replaced = false;
        for line in index.lines() {
            if line.starts_with(&prefix) {
                if !replaced {
                    lines.push(entry.clone());
                    replaced = true;
                }
            } else {
                lines.push(line.to_string());
            }
        }
        if !replaced {
            lines.push(entry);
        }
        let mut text = lines.join("\n");
        text.push('\n');
        let index_path = self.index_path();
        write_note(&index_path, &text)?;
        Ok(path)
    }

    /// Case-insensitive search over all notes; at most `max_hits` hits.
    pub fn search(&self, query: &str, max_hits: usize) -> Result<Vec<SearchHit>, MemoryError> {
        let needle = query.to_lowercase();
        let dir = self.notes_dir();
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(MemoryError::Io {
                    action: "listing",
                    path: dir,
                    source,
                });
            }
        };
        let mut files: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "md"))
            .collect();
        files.sort();
        let mut hits = Vec::new();
        for path in files {
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            let note = path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            let name_matches = note.to_lowercase().contains(&needle);
            for (n, line) in text.lines().enumerate() {
                if line.to_lowercase().contains(&needle) || (name_matches && n == 0) {
                    hits.push(SearchHit {
                        note: note.clone(),
                        line: n + 1,
                        text: line.to_string(),
                    });
                    if hits.len() >= max_hits {
                        return Ok(hits);
                    }
                }
            }
        }
        Ok(hits)
    }
}

/// Writes a note (or the index) atomically, synced with its folder; the mode is what a
/// plain create gives (0666 less the umask).
fn write_note(path: &Path, text: &str) -> Result<(), MemoryError> {
    crate::agent::private_file::write_atomic(path, text.as_bytes(), 0o666).map_err(|e| {
        MemoryError::Io {
            action: e.action,
            path: e.path,
            source: e.source,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_read_search_and_index() {
        let dir = tempfile::tempdir().unwrap();
        let m = Memory::new(dir.path());
        assert_eq!(m.index(), "");
        m.write(
            "build",
            "how to build",
            "Run cargo build --release.\nNeeds openssl.",
        )
        .unwrap();
        m.write("style", "code style", "Use rustfmt.").unwrap();
        m.write("build", "how to build (updated)", "Use make.")
            .unwrap();
        assert_eq!(
            m.index(),
            "- [build](memory/build.md) — how to build (updated)\n- [style](memory/style.md) — code style\n"
        );
        assert_eq!(m.read("build").unwrap(), "Use make.");
        assert_eq!(
            m.search("RUSTFMT", 10).unwrap(),
            vec![SearchHit {
                note: "style".into(),
                line: 1,
                text: "Use rustfmt.".into()
            }]
        );
        assert!(matches!(m.read("nope"), Err(MemoryError::NotFound(_))));
        for bad in ["../x", "", "a/b", ".hidden", "a..b"] {
            assert!(
                matches!(m.write(bad, "s", "c"), Err(MemoryError::InvalidName(_))),
                "{bad}"
            );
        }
    }
}
