//! `JSONValidation/errors.out`: one JSON line per rejection (the schema layer judges, the store
//! writes). Each machine writes its own `JSONValidation/errors@<host>.out`
//! ([`super::perhost`]); [`crate::store::Store::read_errors`] merges them with the PRD-named file.

use super::fsio::append_line_locked;
use crate::model::Timestamp;
use crate::schema::Rejection;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The PRD's name of the validation log, relative to the store root.
pub const ERRORS_OUT: &str = "JSONValidation/errors.out";

/// One line of `errors.out` (PRD §9 `log_error`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorLogEntry {
    /// When the rejection happened.
    pub timestamp: Timestamp,
    /// Schema name.
    #[serde(rename = "type")]
    pub kind: String,
    /// Document id, or the file name, or `unknown`.
    pub id: String,
    /// Every failing field, `pointer: message; …`.
    pub error: String,
}

/// Appends rejections to an `errors.out` file.
///
/// Each entry is one locked append ([`append_line_locked`]), so concurrent
/// writers on one machine (several daemons, CLIs) never interleave; machines have a file each.
#[derive(Debug, Clone)]
pub struct ErrorLog {
    path: PathBuf,
}

impl ErrorLog {
    /// A log at `path` (created on first write).
    pub fn new(path: impl Into<PathBuf>) -> ErrorLog {
        ErrorLog { path: path.into() }
    }

    /// The file written to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Records `rejection` for the document known as `id`.
    pub fn record(&self, id: &str, rejection: &Rejection) -> std::io::Result<()> {
        let entry = ErrorLogEntry {
            timestamp: Timestamp::now(),
            kind: rejection.kind.name().to_string(),
            id: crate::schema::quote_limited(id, crate::schema::MAX_QUOTE_BYTES),
            // Each field error quotes at most 1 KiB; the whole entry stays a few KiB.
            error: crate::schema::quote_limited(
                &rejection
                    .errors
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; "),
                4 * crate::schema::MAX_QUOTE_BYTES,
            ),
        };
        self.append(&entry)
    }

    /// Appends one entry as one line.
    pub fn append(&self, entry: &ErrorLogEntry) -> std::io::Result<()> {
        let line = serde_json::to_vec(entry).map_err(std::io::Error::other)?;
        append_line_locked(&self.path, &line)
    }
}
