//! What can go wrong with the store ([`StoreError`]), and the id check every name passes
//! before it becomes part of a path.

use super::ConfigError;
use crate::model::is_safe_id;
use crate::schema::{Rejection, SchemaError};
use std::io;
use std::path::{Path, PathBuf};

/// Errors from store access.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A document that was asked for does not exist.
    #[error("{kind} not found: {id}")]
    NotFound {
        /// What kind of document (user, project, prd, queue, job).
        kind: &'static str,
        /// The id asked for.
        id: String,
    },
    /// An id that is not a safe file name.
    #[error(
        "invalid {kind} id {id:?}: ids are letters, digits, '.', '_' and '-', starting with a letter or digit, no '..', at most 200 bytes"
    )]
    BadId {
        /// What kind of id.
        kind: &'static str,
        /// The id.
        id: String,
    },
    /// A document failed its schema.
    #[error("{path}: {rejection}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The failing fields.
        rejection: Rejection,
    },
    /// An I/O error on a path.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// Cause.
        source: io::Error,
    },
    /// `config.yaml` is wrong.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A schema is wrong.
    #[error(transparent)]
    Schema(#[from] SchemaError),
    /// Creating something that exists.
    #[error("{kind} already exists: {id}")]
    Exists {
        /// What kind.
        kind: &'static str,
        /// The id.
        id: String,
    },
}

/// Result alias for store operations.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

pub(super) fn io_err(path: &Path) -> impl FnOnce(io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Checks an id before it becomes part of a path.
pub fn check_id(kind: &'static str, id: &str) -> Result<()> {
    if is_safe_id(id) {
        Ok(())
    } else {
        Err(StoreError::BadId {
            kind,
            id: crate::schema::quote_limited(id, crate::schema::MAX_QUOTE_BYTES),
        })
    }
}
