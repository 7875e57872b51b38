//! The one JSON Schema validator (PRD §9).
//!
//! Schemas are embedded from `schemas/` at build time and compiled once. When a store carries
//! its own copy in `JSONValidation/Schemas/<kind>.schema.json`, that copy is used instead, as
//! the PRD says. A rejection names every failing field by JSON pointer and can be logged as one
//! JSON line in `JSONValidation/errors.out` ([`ErrorLog`]).

mod error_log;

pub use error_log::{ErrorLog, ErrorLogEntry};

use crate::model::DocKind;
use jsonschema::error::ValidationErrorKind;
use serde_json::Value;
use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// Embedded copies of the six schemas, the source of truth for new stores.
pub const EMBEDDED: [(DocKind, &str); 6] = [
    (
        DocKind::User,
        include_str!("../../schemas/user.schema.json"),
    ),
    (
        DocKind::Message,
        include_str!("../../schemas/message.schema.json"),
    ),
    (
        DocKind::Project,
        include_str!("../../schemas/project.schema.json"),
    ),
    (DocKind::Prd, include_str!("../../schemas/prd.schema.json")),
    (
        DocKind::Queue,
        include_str!("../../schemas/queue.schema.json"),
    ),
    (DocKind::Job, include_str!("../../schemas/job.schema.json")),
];

/// Largest document the validator will parse; bigger files are rejected unread.
/// A job with 10 MB of output plus its config fits well within this.
pub const MAX_DOCUMENT_BYTES: u64 = 16 * 1024 * 1024;

/// Errors building the validator.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    /// A schema file could not be read.
    #[error("cannot read schema {path}: {source}")]
    Read {
        /// The schema file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A schema is not valid JSON or not a valid draft 2020-12 schema.
    #[error("invalid schema {origin}: {message}")]
    Compile {
        /// Where the schema came from.
        origin: String,
        /// What is wrong.
        message: String,
    },
}

/// One failing field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// JSON pointer of the field (`/runtime/status`); empty for the whole document.
    pub pointer: String,
    /// What is wrong with it.
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = if self.pointer.is_empty() {
            "/"
        } else {
            &self.pointer
        };
        write!(f, "{at}: {}", self.message)
    }
}

/// Why a document was rejected: every failing field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// The schema it was checked against.
    pub kind: DocKind,
    /// The failures, in document order.
    pub errors: Vec<FieldError>,
}

impl Rejection {
    fn whole(kind: DocKind, message: String) -> Rejection {
        Rejection {
            kind,
            errors: vec![FieldError {
                pointer: String::new(),
                message,
            }],
        }
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid {} document: ", self.kind)?;
        for (i, e) in self.errors.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Rejection {}

/// The six compiled schemas.
pub struct Validator {
    compiled: HashMap<DocKind, jsonschema::Validator>,
}

impl fmt::Debug for Validator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Validator")
            .field("kinds", &self.compiled.len())
            .finish()
    }
}

impl Validator {
    /// Compiles the embedded schemas.
    pub fn embedded() -> Result<Validator, SchemaError> {
        Self::with_overrides(None)
    }

    /// Compiles the schemas, preferring `<dir>/<kind>.schema.json` where it exists
    /// (a store's `JSONValidation/Schemas/`).
    pub fn with_overrides(dir: Option<&Path>) -> Result<Validator, SchemaError> {
        let mut compiled = HashMap::new();
        for (kind, text) in EMBEDDED {
            let override_path = dir.map(|d| d.join(format!("{kind}.schema.json")));
            let (origin, text) = match override_path.filter(|p| p.is_file()) {
                Some(path) => {
                    let t = std::fs::read_to_string(&path).map_err(|source| SchemaError::Read {
                        path: path.clone(),
                        source,
                    })?;
                    (path.display().to_string(), t)
                }
                None => (format!("embedded {kind}.schema.json"), text.to_string()),
            };
            let schema: Value = serde_json::from_str(&text).map_err(|e| SchemaError::Compile {
                origin: origin.clone(),
                message: e.to_string(),
            })?;
            let v = jsonschema::draft202012::new(&schema).map_err(|e| SchemaError::Compile {
                origin,
                message: e.to_string(),
            })?;
            compiled.insert(kind, v);
        }
        Ok(Validator { compiled })
    }

    /// Checks `doc` against the schema of `kind`.
    pub fn validate(&self, kind: DocKind, doc: &Value) -> Result<(), Rejection> {
        let Some(v) = self.compiled.get(&kind) else {
            return Err(Rejection::whole(kind, format!("no schema for {kind}")));
        };
        let errors: Vec<FieldError> = v.iter_errors(doc).map(field_error).collect();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(Rejection { kind, errors })
        }
    }

    /// Parses and checks raw bytes; a parse failure is a rejection of the whole document.
    pub fn validate_bytes(&self, kind: DocKind, bytes: &[u8]) -> Result<Value, Rejection> {
        if bytes.len() as u64 > MAX_DOCUMENT_BYTES {
            return Err(Rejection::whole(
                kind,
                format!("document is larger than the {MAX_DOCUMENT_BYTES} byte limit"),
            ));
        }
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Err(Rejection::whole(
                kind,
                "empty file: expected a JSON object".into(),
            ));
        }
        let doc: Value = crate::model::strict::parse_value(bytes)
            .map_err(|e| Rejection::whole(kind, format!("not valid JSON: {e}")))?;
        self.validate(kind, &doc)?;
        Ok(doc)
    }

    /// Checks `doc` and then deserialises it into its typed model.
    pub fn parse<T: serde::de::DeserializeOwned>(
        &self,
        kind: DocKind,
        bytes: &[u8],
    ) -> Result<T, Rejection> {
        let doc = self.validate_bytes(kind, bytes)?;
        serde_json::from_value(doc).map_err(|e| Rejection::whole(kind, e.to_string()))
    }
}

/// Turns one jsonschema error into a field error whose pointer names the field itself
/// (for `required` and `additionalProperties`, the missing or unexpected member).
fn field_error(e: jsonschema::ValidationError<'_>) -> FieldError {
    let base = e.instance_path().as_str().to_string();
    let pointer = match e.kind() {
        ValidationErrorKind::Required { property } => {
            format!("{base}/{}", property.as_str().unwrap_or_default())
        }
        ValidationErrorKind::AdditionalProperties { unexpected }
        | ValidationErrorKind::UnevaluatedProperties { unexpected } => {
            match unexpected.as_slice() {
                [one] => format!("{base}/{one}"),
                _ => base,
            }
        }
        _ => base,
    };
    FieldError {
        pointer,
        message: e.to_string(),
    }
}

/// The id a document is known by, for error logs: `id`, `correlation_id`, or `config.id`.
pub fn document_id(doc: &Value) -> Option<&str> {
    doc.get("id")
        .or_else(|| doc.get("correlation_id"))
        .or_else(|| doc.get("config").and_then(|c| c.get("id")))
        .and_then(Value::as_str)
}
