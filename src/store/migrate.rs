//! `orchestrator migrate` (issue 17): brings a store to this build's schema version, file by
//! file, each write atomic, idempotent.
//!
//! 0.5 → 0.6: the store's schema copies (`JSONValidation/Schemas/`) are replaced by this
//! build's (the old one kept beside it as `<kind>.schema.json.v0.5.bak`); every ended job
//! (finished, failed, archived) gets `schema_version` and an explicit `config.priority`
//! (normal); `config.yaml` gets `schema_version` last, so an interrupted run leaves a 0.5 store
//! that a second run finishes. Queued and running jobs are left alone (their queue manager
//! and worker own them; they read as 0.5 documents) and counted.

use super::{Store, file_id, scan_dir, write_atomic};
use crate::model::flow::{PRIORITY_NORMAL, SCHEMA_VERSION, compare_versions};
use crate::model::{DocKind, JobStatus};
use crate::schema::Validator;
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};

/// What a migration did (or, dry, would do).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct MigrateReport {
    /// The store's version before.
    pub from: String,
    /// The version after.
    pub to: String,
    /// Schema copies replaced or added.
    pub schemas: Vec<PathBuf>,
    /// Job documents upgraded.
    pub upgraded: Vec<PathBuf>,
    /// Job documents already current.
    pub current: usize,
    /// Queued or running jobs left as they are.
    pub in_use: usize,
    /// Files that could not be upgraded, with why (left unchanged).
    pub errors: Vec<String>,
    /// Whether `config.yaml` gets (got) its new version.
    pub config: bool,
}

/// Upgrades `store` (unless `dry_run`).
pub fn migrate(store: &Store, dry_run: bool) -> super::Result<MigrateReport> {
    let mut r = MigrateReport {
        from: store.config().schema_version().to_string(),
        to: SCHEMA_VERSION.to_string(),
        ..MigrateReport::default()
    };
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |source| super::StoreError::Io { path: p, source }
    };
    // 1. Schema copies.
    for (kind, text) in crate::schema::EMBEDDED {
        let p = store.schemas_dir().join(format!("{kind}.schema.json"));
        let old = super::read_limited(&p).ok();
        if old.as_deref() == Some(text.as_bytes()) {
            continue;
        }
        if !dry_run {
            if let Some(old) = &old {
                let bak = store
                    .schemas_dir()
                    .join(format!("{kind}.schema.json.v{}.bak", r.from));
                if !super::safe::exists(&bak) {
                    write_atomic(&bak, old).map_err(io(&bak))?;
                }
            }
            write_atomic(&p, text.as_bytes()).map_err(io(&p))?;
        }
        r.schemas.push(p);
    }
    // 2. Job documents, judged by this build's schemas.
    let v = Validator::embedded()?;
    for q in store.queue_ids()? {
        for s in [JobStatus::Queued, JobStatus::Running] {
            if let Ok(scan) = scan_dir(&store.jobs_dir(&q, s)) {
                r.in_use += scan.documents.len();
            }
        }
        // What cannot be read (a folder or file that is a link, a FIFO, …) is named among
        // the errors: a migration never reports success over files it passed by.
        let mut files: Vec<PathBuf> = Vec::new();
        for s in [JobStatus::Finished, JobStatus::Failed] {
            let dir = store.jobs_dir(&q, s);
            files.extend(super::archive::scan_reporting(&dir, &mut r.errors));
        }
        let archived = super::archive::archived_reporting(store, Some(&q), Some(&mut r.errors))?;
        files.extend(archived.into_iter().map(|a| a.path));
        for path in files {
            if file_id(&path).is_none() {
                continue;
            }
            match upgrade_job(&v, &path) {
                Ok(None) => r.current += 1,
                Ok(Some(bytes)) => {
                    #[cfg(debug_assertions)]
                    held_for_test(r.upgraded.len());
                    if !dry_run && let Err(e) = write_atomic(&path, &bytes) {
                        r.errors.push(format!("{}: {e}", path.display()));
                        continue;
                    }
                    r.upgraded.push(path);
                }
                Err(e) => r.errors.push(format!("{}: {e}", path.display())),
            }
        }
    }
    // 3. The store's version, last.
    if store.config().schema_version.as_deref() != Some(SCHEMA_VERSION) {
        r.config = true;
        if !dry_run {
            let p = store.root().join("config.yaml");
            let text = super::read_limited(&p)
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default();
            let line = format!("schema_version: \"{SCHEMA_VERSION}\"");
            let mut replaced = false;
            let mut out: Vec<String> = text
                .lines()
                .map(|l| {
                    if l.starts_with("schema_version:") {
                        replaced = true;
                        line.clone()
                    } else {
                        l.to_string()
                    }
                })
                .collect();
            if !replaced {
                out.push(String::new());
                out.push(
                    "# schema version of this store's documents (orchestrator migrate)".into(),
                );
                out.push(line);
            }
            let mut t = out.join("\n");
            t.push('\n');
            write_atomic(&p, t.as_bytes()).map_err(io(&p))?;
        }
    }
    Ok(r)
}

/// Test hook, debug builds only (release binaries have none): `AGENTSTORE_TEST_FAULT` set
/// to `hold-migrate:<n>` stops a migration for good before it writes its job document number
/// `n` (from 0), so a test can kill it at a known point.
#[cfg(debug_assertions)]
fn held_for_test(n: usize) {
    if std::env::var("AGENTSTORE_TEST_FAULT").is_ok_and(|f| f == format!("hold-migrate:{n}")) {
        loop {
            std::thread::sleep(std::time::Duration::from_secs(3600));
        }
    }
}

/// The upgraded bytes of one job file, or `None` when it is already current.
fn upgrade_job(v: &Validator, path: &Path) -> Result<Option<Vec<u8>>, String> {
    let bytes = super::read_document(path)?;
    let value = crate::model::strict::parse_value(&bytes).map_err(|e| e.to_string())?;
    let Value::Object(doc) = value else {
        return Err("not a JSON object".into());
    };
    match doc.get("schema_version") {
        None => {}
        Some(Value::String(v)) if v == SCHEMA_VERSION => return Ok(None),
        // Never downgraded: a document written by a newer agentstore keeps what it says.
        Some(Value::String(v)) => match compare_versions(v, SCHEMA_VERSION) {
            Some(std::cmp::Ordering::Less) => {}
            Some(_) => {
                return Err(format!(
                    "schema_version {v:?} is newer than this agentstore's ({SCHEMA_VERSION}); left as it is (migrate it with the newer agentstore)"
                ));
            }
            None => {
                return Err(format!(
                    "schema_version {v:?} is not a version (expected e.g. \"{SCHEMA_VERSION}\"); left as it is"
                ));
            }
        },
        Some(other) => {
            return Err(format!(
                "schema_version {other} is not a string (expected e.g. \"{SCHEMA_VERSION}\"); left as it is"
            ));
        }
    }
    let mut out = Map::new();
    out.insert(
        "schema_version".into(),
        Value::String(SCHEMA_VERSION.into()),
    );
    for (k, val) in doc {
        if k == "schema_version" {
            continue;
        }
        out.insert(k, val);
    }
    if let Some(Value::Object(c)) = out.get_mut("config") {
        c.entry("priority").or_insert(Value::from(PRIORITY_NORMAL));
    }
    let value = Value::Object(out);
    v.validate(DocKind::Job, &value)
        .map_err(|rej| format!("would not be a valid job after the upgrade: {rej}"))?;
    let mut text = serde_json::to_vec_pretty(&value).map_err(|e| e.to_string())?;
    text.push(b'\n');
    Ok(Some(text))
}
