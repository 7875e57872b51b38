//! The one JSON Schema validator (PRD §9).
//!
//! Schemas are embedded from `schemas/` at build time and compiled once. When a store carries
//! its own copy in `JSONValidation/Schemas/<kind>.schema.json`, that copy is used instead, as
//! the PRD says. A copy that differs from the embedded schema is compiled when the store is
//! opened (a broken one stops the opening); the embedded schema (and a copy identical to it,
//! what `init` writes, or to what an earlier release's `init` wrote: [`RELEASED`]) is compiled at its kind's first use, so a short-lived process (a job's
//! worker) compiles only the kinds it reads or writes. A rejection names every failing field by JSON pointer and can be logged as one
//! JSON line in `JSONValidation/errors.out` (`store::ErrorLog` writes it; this layer does no I/O
//! on the store).

use crate::model::DocKind;
use jsonschema::error::ValidationErrorKind;
use serde_json::Value;
use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// Embedded copies of the seven schemas, the source of truth for new stores.
pub const EMBEDDED: [(DocKind, &str); 7] = [
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
    (
        DocKind::Task,
        include_str!("../../schemas/task.schema.json"),
    ),
];

/// The schemas earlier releases embedded, as their `init` wrote them into stores
/// (`schemas/released/<tag>/`; the message schema has not changed since). A store copy that is
/// one of these to the byte was never edited by anyone: it stands for "the schema of the
/// release that made this store", so this build's embedded schema is used in its place.
/// Otherwise a package upgrade would judge the new release's documents by the old copies (a
/// v0.1.0 store refused every job with `runtime.usage`, and its finished jobs were never
/// handled). A copy someone edited is still the store's own. `orchestrator migrate` rewrites
/// the copies themselves.
pub const RELEASED: [(DocKind, &str); 5] = [
    (
        DocKind::Job,
        include_str!("../../schemas/released/v0.1.0/job.schema.json"),
    ),
    (
        DocKind::Prd,
        include_str!("../../schemas/released/v0.1.0/prd.schema.json"),
    ),
    (
        DocKind::Project,
        include_str!("../../schemas/released/v0.1.0/project.schema.json"),
    ),
    (
        DocKind::Queue,
        include_str!("../../schemas/released/v0.1.0/queue.schema.json"),
    ),
    (
        DocKind::User,
        include_str!("../../schemas/released/v0.1.0/user.schema.json"),
    ),
];

/// True when `text` is `kind`'s schema as this build or an earlier release embedded it.
pub fn is_shipped_copy(kind: DocKind, text: &str) -> bool {
    EMBEDDED.iter().any(|(k, t)| *k == kind && *t == text)
        || RELEASED.iter().any(|(k, t)| *k == kind && *t == text)
}

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
                message: quote_limited(&message, MAX_QUOTE_BYTES),
            }],
        }
    }
}

/// Most bytes of a bad value (or of one error message) an error report quotes: a 5 MB bad
/// field costs `errors.out` and the answer about 1 KiB, not 5 MB.
pub const MAX_QUOTE_BYTES: usize = 1024;

/// Most field errors one rejection lists; the rest are counted.
pub const MAX_FIELD_ERRORS: usize = 20;

/// `text` cut to at most `max` bytes (on a character boundary), saying how much was cut.
pub fn quote_limited(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}… [{} more bytes not shown]",
        &text[..end],
        text.len() - end
    )
}

fn limit_errors(errors: &mut Vec<FieldError>) {
    if errors.len() > MAX_FIELD_ERRORS {
        let more = errors.len() - MAX_FIELD_ERRORS;
        errors.truncate(MAX_FIELD_ERRORS);
        errors.push(FieldError {
            pointer: String::new(),
            message: format!("… and {more} more errors"),
        });
    }
    for e in errors.iter_mut() {
        if e.pointer.len() > MAX_QUOTE_BYTES {
            e.pointer = quote_limited(&e.pointer, MAX_QUOTE_BYTES);
        }
    }
}

/// Collects the paths (`*` for every array item) of properties that `$ref` the id
/// definitions in `schema`.
fn id_pointers(node: &Value, at: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    match node {
        Value::Object(map) => {
            if let Some(Value::String(r)) = map.get("$ref")
                && (r == "#/$defs/id" || r == "#/$defs/id_or_null")
            {
                out.push(at.clone());
            }
            for (k, v) in map {
                match k.as_str() {
                    "$defs" => {}
                    "properties" => {
                        if let Value::Object(props) = v {
                            for (name, sub) in props {
                                at.push(name.clone());
                                id_pointers(sub, at, out);
                                at.pop();
                            }
                        }
                    }
                    "items" => {
                        at.push("*".to_string());
                        id_pointers(v, at, out);
                        at.pop();
                    }
                    _ => id_pointers(v, at, out),
                }
            }
        }
        Value::Array(items) => {
            for v in items {
                id_pointers(v, at, out);
            }
        }
        _ => {}
    }
}

/// Checks every string at `path` in `doc` with the one id rule ([`crate::model::is_safe_id`]).
fn check_ids(doc: &Value, path: &[String], pointer: &mut String, errors: &mut Vec<FieldError>) {
    let Some((first, rest)) = path.split_first() else {
        if let Value::String(id) = doc
            && let Some(problem) = crate::model::id_problem(id)
            && !errors.iter().any(|e| e.pointer == *pointer)
        {
            errors.push(FieldError {
                pointer: pointer.clone(),
                message: format!(
                    "{} is not a safe id: it {problem} (ids are letters, digits, '.', '_' and '-', starting with a letter or digit, no '..', at most 200 bytes)",
                    quote_limited(&format!("{id:?}"), MAX_QUOTE_BYTES)
                ),
            });
        }
        return;
    };
    let len = pointer.len();
    if first == "*" {
        if let Value::Array(items) = doc {
            for (i, item) in items.iter().enumerate() {
                pointer.push_str(&format!("/{i}"));
                check_ids(item, rest, pointer, errors);
                pointer.truncate(len);
            }
        }
    } else if let Some(v) = doc.get(first.as_str()) {
        pointer.push('/');
        pointer.push_str(first);
        check_ids(v, rest, pointer, errors);
        pointer.truncate(len);
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

/// One kind's schema.
enum Schema {
    /// A store copy that differs from the embedded schema, compiled when the store was opened.
    Own(jsonschema::Validator),
    /// The embedded schema (or a store copy identical to it), compiled at first use.
    Embedded(
        &'static str,
        std::sync::OnceLock<Result<jsonschema::Validator, String>>,
    ),
}

impl Schema {
    fn get(&self) -> Result<&jsonschema::Validator, &str> {
        match self {
            Schema::Own(v) => Ok(v),
            Schema::Embedded(text, v) => v
                .get_or_init(|| compile_embedded(text).map_err(|e| e.to_string()))
                .as_ref()
                .map_err(String::as_str),
        }
    }
}

/// Parses and compiles schema `text` (from `origin`).
fn compile(origin: &str, text: &str) -> Result<jsonschema::Validator, SchemaError> {
    let schema: Value = serde_json::from_str(text).map_err(|e| SchemaError::Compile {
        origin: origin.to_string(),
        message: e.to_string(),
    })?;
    jsonschema::draft202012::new(&schema).map_err(|e| SchemaError::Compile {
        origin: origin.to_string(),
        message: e.to_string(),
    })
}

/// Compiles an embedded schema (text built into this program, whose compile with the full
/// check of the schema itself is a unit test, `every_embedded_schema_compiles`) without
/// checking it against its meta-schema again: building jsonschema's draft 2020-12
/// meta-schema validator is a third of a short-lived worker's whole CPU. The schema is put in
/// a registry under its `$id` and reached through a draft-4 root `{"$ref": <$id>}` (the only
/// document meta-checked, against draft 4's much smaller meta-schema); the referenced schema
/// keeps its own dialect (`$schema`: 2020-12), so it validates exactly as compiled directly.
fn compile_embedded(text: &str) -> Result<jsonschema::Validator, SchemaError> {
    let fail = |message: String| SchemaError::Compile {
        origin: "embedded".to_string(),
        message,
    };
    let schema: Value = serde_json::from_str(text).map_err(|e| fail(e.to_string()))?;
    let Some(id) = schema
        .get("$id")
        .and_then(Value::as_str)
        .map(str::to_string)
    else {
        return compile("embedded", text);
    };
    let registry = jsonschema::Registry::new()
        .add(id.as_str(), schema)
        .and_then(|r| r.prepare())
        .map_err(|e| fail(e.to_string()))?;
    jsonschema::options()
        .with_draft(jsonschema::Draft::Draft4)
        .with_registry(&registry)
        .build(&serde_json::json!({ "$ref": id }))
        .map_err(|e| fail(e.to_string()))
}

/// Where a kind's documents carry ids (JSON paths, `*` for every array item), read from its
/// embedded schema at the first check of the kind.
type IdFields = std::sync::OnceLock<Vec<Vec<String>>>;

/// The six schemas.
pub struct Validator {
    compiled: HashMap<DocKind, Schema>,
    /// Where each kind carries ids that become file names, taken from the *embedded* schemas
    /// so a loosened store copy cannot turn the code-side check off.
    id_fields: HashMap<DocKind, (&'static str, IdFields)>,
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
        Self::with_overrides(None, &|_| Ok(None))
    }

    /// Compiles the schemas, preferring `<dir>/<kind>.schema.json` where `read` finds it
    /// (a store's `JSONValidation/Schemas/`). `read` gives the file's text, `None` when it
    /// does not exist; the store passes its no-link reader (this layer does no store I/O).
    pub fn with_overrides(
        dir: Option<&Path>,
        read: &dyn Fn(&Path) -> std::io::Result<Option<String>>,
    ) -> Result<Validator, SchemaError> {
        let mut compiled = HashMap::new();
        for (kind, text) in EMBEDDED {
            let override_text = match dir.map(|d| d.join(format!("{kind}.schema.json"))) {
                Some(path) => read(&path)
                    .map_err(|source| SchemaError::Read {
                        path: path.clone(),
                        source,
                    })?
                    .map(|t| (path, t)),
                None => None,
            };
            let schema = match override_text {
                Some((path, t)) if !is_shipped_copy(kind, &t) => {
                    Schema::Own(compile(&path.display().to_string(), &t)?)
                }
                _ => Schema::Embedded(text, std::sync::OnceLock::new()),
            };
            compiled.insert(kind, schema);
        }
        // Read from the embedded schemas at the first check of each kind (a short-lived
        // process, such as a worker, checks two kinds of the six).
        let id_fields = EMBEDDED
            .iter()
            .map(|(kind, text)| (*kind, (*text, std::sync::OnceLock::new())))
            .collect();
        Ok(Validator {
            compiled,
            id_fields,
        })
    }

    /// Compiles the schemas of `kinds` now (each is otherwise compiled at its first use):
    /// a process can do it while it waits for something else.
    pub fn prepare(&self, kinds: &[DocKind]) {
        for k in kinds {
            if let Some(s) = self.compiled.get(k) {
                let _ = s.get();
            }
        }
    }

    /// Where documents of `kind` carry ids that become file names (from the embedded schema).
    fn id_fields(&self, kind: DocKind) -> &[Vec<String>] {
        let Some((text, fields)) = self.id_fields.get(&kind) else {
            return &[];
        };
        fields.get_or_init(|| {
            // The embedded schemas parse (a test of this module says so).
            let schema: Value = serde_json::from_str(text).unwrap_or(Value::Null);
            let mut found = Vec::new();
            id_pointers(&schema, &mut Vec::new(), &mut found);
            if kind == DocKind::Message {
                // `project` names a folder too (checked again by the store on lookup).
                found.push(vec!["project".to_string()]);
            }
            found
        })
    }

    /// Checks `doc` against the schema of `kind`.
    pub fn validate(&self, kind: DocKind, doc: &Value) -> Result<(), Rejection> {
        let Some(v) = self.compiled.get(&kind) else {
            return Err(Rejection::whole(kind, format!("no schema for {kind}")));
        };
        // The embedded schemas compile (a test of this module says so); were one not to,
        // every document of its kind would be refused, saying why.
        let v = v.get().map_err(|e| {
            Rejection::whole(
                kind,
                format!("the embedded {kind} schema does not compile: {e}"),
            )
        })?;
        let mut errors: Vec<FieldError> = v.iter_errors(doc).map(field_error).collect();
        for path in self.id_fields(kind) {
            check_ids(doc, path, &mut String::new(), &mut errors);
        }
        check_not_newer(doc, &mut errors);
        limit_errors(&mut errors);
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

/// A document's own `schema_version` newer than this build's is refused (read as it is, an
/// older agentstore would drop or misread what the newer one wrote), naming both versions.
fn check_not_newer(doc: &Value, errors: &mut Vec<FieldError>) {
    use crate::model::flow::{SCHEMA_VERSION, compare_versions};
    let Some(v) = doc.get("schema_version").and_then(Value::as_str) else {
        return;
    };
    if compare_versions(v, SCHEMA_VERSION) == Some(std::cmp::Ordering::Greater) {
        errors.push(FieldError {
            pointer: "/schema_version".into(),
            message: format!(
                "{} was written by a newer agentstore; this one understands schema versions up to {SCHEMA_VERSION} and refuses it",
                quote_limited(v, MAX_QUOTE_BYTES)
            ),
        });
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
        message: quote_limited(&e.to_string(), MAX_QUOTE_BYTES),
    }
}

/// The id a document is known by, for error logs: `id`, `correlation_id`, or `config.id`.
pub fn document_id(doc: &Value) -> Option<&str> {
    doc.get("id")
        .or_else(|| doc.get("correlation_id"))
        .or_else(|| doc.get("config").and_then(|c| c.get("id")))
        .and_then(Value::as_str)
}

#[cfg(test)]
mod lazy_tests {
    use super::*;

    /// The embedded schemas are compiled only at first use: each must compile.
    #[test]
    fn every_embedded_schema_compiles() {
        for (kind, text) in EMBEDDED {
            compile(&format!("embedded {kind}"), text)
                .unwrap_or_else(|e| panic!("embedded {kind} schema: {e}"));
        }
    }

    /// An embedded schema compiled without its meta-schema check (`compile_embedded`)
    /// judges every document of the repository's corpora (valid and invalid, each kind)
    /// exactly as the schema compiled directly: the same errors, in the same order.
    #[test]
    fn embedded_compile_judges_as_the_direct_compile() {
        let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
        let mut judged = 0;
        for (kind, text) in EMBEDDED {
            let direct = compile("direct", text).unwrap();
            let embedded = compile_embedded(text).unwrap();
            for set in ["valid", "invalid"] {
                let dir = corpus.join(set).join(kind.name());
                for entry in std::fs::read_dir(&dir).unwrap() {
                    let path = entry.unwrap().path();
                    let Ok(doc) = serde_json::from_slice::<Value>(&std::fs::read(&path).unwrap())
                    else {
                        continue; // the corpus's unparseable cases
                    };
                    let errors = |v: &jsonschema::Validator| -> Vec<FieldError> {
                        v.iter_errors(&doc).map(field_error).collect()
                    };
                    assert_eq!(errors(&embedded), errors(&direct), "{}", path.display());
                    assert_eq!(
                        set == "valid",
                        errors(&direct).is_empty(),
                        "{}",
                        path.display()
                    );
                    judged += 1;
                }
            }
        }
        assert!(judged > 50, "only {judged} documents judged");
    }

    /// A store copy identical to the embedded schema is the embedded one (compiled at first
    /// use); a different copy is compiled at once, and a broken one stops the opening.
    #[test]
    fn store_copies_identical_or_own() {
        let read_same = |p: &Path| -> std::io::Result<Option<String>> {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            Ok(EMBEDDED
                .iter()
                .find(|(k, _)| format!("{k}.schema.json") == name)
                .map(|(_, t)| t.to_string()))
        };
        let v = Validator::with_overrides(Some(Path::new("/s")), &read_same).unwrap();
        assert!(
            v.compiled
                .values()
                .all(|s| matches!(s, Schema::Embedded(_, c) if c.get().is_none()))
        );
        let broken = |p: &Path| -> std::io::Result<Option<String>> {
            Ok(p.ends_with("job.schema.json")
                .then(|| r#"{"type": "object", "properties": {"a": {"pattern": "("}}}"#.into()))
        };
        let err = Validator::with_overrides(Some(Path::new("/s")), &broken).unwrap_err();
        assert!(err.to_string().contains("job.schema.json"), "{err}");
    }

    /// A store made by an earlier release keeps that release's copies; unedited, they stand
    /// for "this release's schema", so the new release's documents are accepted (a v0.1.0
    /// copy refused `runtime.usage`, seen in the system soak after the package upgrade). An
    /// edited copy is the store's own and is used as it is.
    #[test]
    fn an_earlier_releases_unedited_copy_is_this_builds_schema() {
        let (_, old_job) = RELEASED.iter().find(|(k, _)| *k == DocKind::Job).unwrap();
        let job: Value = serde_json::from_str(
            r#"{"config": {"project": "p", "working_directory": "/tmp", "queue_time": "2026-12-02T00:00:00Z",
                "jobtype": "noop", "claude_command": "", "claude_extra_args": [], "task_description": "",
                "supporting_data": {}, "timeout_seconds": 60},
              "runtime": {"status": "finished", "start_time": null, "finish_time": null, "process_id": null,
                "llm_process_id": null, "error": null, "output": "ok",
                "usage": {"input_tokens": 1, "output_tokens": 2}}}"#,
        )
        .unwrap();
        let copy = |text: &'static str| {
            move |p: &Path| -> std::io::Result<Option<String>> {
                Ok(p.ends_with("job.schema.json").then(|| text.to_string()))
            }
        };
        let old = Validator::with_overrides(Some(Path::new("/s")), &copy(old_job)).unwrap();
        old.validate(DocKind::Job, &job).unwrap();
        // The same copy with one byte changed is someone's edit: it is used, and refuses.
        let edited: &'static str = Box::leak(
            old_job
                .replacen("\"title\": \"Job\"", "\"title\": \"Job.\"", 1)
                .into_boxed_str(),
        );
        assert_ne!(edited, *old_job);
        let own = Validator::with_overrides(Some(Path::new("/s")), &copy(edited)).unwrap();
        let refused = own.validate(DocKind::Job, &job).unwrap_err();
        assert!(refused.to_string().contains("usage"), "{refused}");
    }
}
