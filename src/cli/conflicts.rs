//! `conflicts` and `conflicts resolve` (issue 13): the sync engines' conflict copies in the
//! store — in place, or set aside under `conflicts/` by the daemons — and keeping one side.

use super::render::write_json;
use super::{CliError, CliResult, Format, GlobalArgs, open_store};
use crate::store::conflicts::{Keep, list_conflicts, resolve_conflict};
use clap::{Subcommand, ValueEnum};
use std::io::Write;
use std::path::PathBuf;

/// `conflicts` actions (none: list).
#[derive(Debug, Subcommand, Clone)]
pub enum ConflictsAction {
    /// Keep one side of a conflict. `--keep original`: the copy is moved to
    /// conflicts/resolved/. `--keep copy`: the copy replaces the original with one rename,
    /// the original kept in conflicts/resolved/ first. Nothing is deleted. Refuses paths
    /// outside the store, links and files that are not conflict copies.
    Resolve {
        /// The conflict copy (as `conflicts` lists it: relative to the store, or absolute).
        path: PathBuf,
        /// Which side to keep.
        #[arg(long, value_enum)]
        keep: KeepArg,
    },
}

/// `--keep` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum KeepArg {
    /// Keep the original file; set the copy aside.
    Original,
    /// Put the copy in the original's place.
    Copy,
}

pub(super) fn run(
    g: &GlobalArgs,
    out: &mut dyn Write,
    action: Option<ConflictsAction>,
) -> CliResult {
    match action {
        None => list(g, out),
        Some(ConflictsAction::Resolve { path, keep }) => resolve(g, out, &path, keep),
    }
}

fn list(g: &GlobalArgs, out: &mut dyn Write) -> CliResult {
    let store = open_store(g)?;
    let (rows, problems) = list_conflicts(&store);
    match g.format {
        Format::Json => write_json(
            out,
            &serde_json::json!({"conflicts": rows, "problems": problems}),
        )?,
        Format::Text => {
            for p in &problems {
                super::render::warning(p);
            }
            if rows.is_empty() {
                writeln!(out, "No conflict copies in the store.")?;
                return Ok(());
            }
            // One block per copy: paths are never cut (they are what `resolve` takes).
            for r in &rows {
                let device = r
                    .device
                    .as_ref()
                    .map(|d| format!(" (device {d})"))
                    .unwrap_or_default();
                let place = if r.set_aside { ", set aside" } else { "" };
                writeln!(out, "{}", r.path)?;
                writeln!(
                    out,
                    "  {} conflict copy{device}, {} bytes, modified {}{place}",
                    r.engine.label(),
                    r.size,
                    r.mtime
                )?;
                match (&r.original, r.original_exists) {
                    (Some(o), true) => writeln!(out, "  of {o} (exists)")?,
                    (Some(o), false) => writeln!(out, "  of {o} (missing)")?,
                    (None, _) => {
                        writeln!(out, "  of a file not known (set aside by an older version)")?
                    }
                }
            }
        }
    }
    Ok(())
}

fn resolve(
    g: &GlobalArgs,
    out: &mut dyn Write,
    path: &std::path::Path,
    keep: KeepArg,
) -> CliResult {
    let store = open_store(g)?;
    let keep = match keep {
        KeepArg::Original => Keep::Original,
        KeepArg::Copy => Keep::Copy,
    };
    let done = resolve_conflict(&store, path, keep).map_err(|e| CliError::new(e.to_string()))?;
    match g.format {
        Format::Json => write_json(out, &done)?,
        Format::Text => {
            let kept = if done.kept.is_empty() {
                "(the original's place is not known)".to_string()
            } else {
                done.kept.clone()
            };
            match (keep, &done.set_aside) {
                (Keep::Copy, Some(s)) => writeln!(
                    out,
                    "The copy is now {kept}; the replaced original is kept as {s}"
                )?,
                (Keep::Copy, None) => {
                    writeln!(out, "The copy is now {kept} (there was no original)")?
                }
                (Keep::Original, s) => writeln!(
                    out,
                    "Kept {kept}; the copy is set aside as {}",
                    s.as_deref().unwrap_or("-")
                )?,
            }
        }
    }
    Ok(())
}
