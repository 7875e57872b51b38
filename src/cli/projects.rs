//! `orchestrator edit-project ID --directory DIR`: change a project's folder (and the file
//! research-code writes) after `add-project` or `setup` made it — a mistyped or moved folder
//! no longer means editing `project.json` by hand (issue 32). PRD §10: the project's owner or
//! an admin (`permissions::project_to_change`).

use super::render::{Format, write_json};
use super::{CliError, CliResult, GlobalArgs, open_store};
use crate::model::{DocKind, Timestamp};
use clap::Args;
use std::io::Write;
use std::path::{Path, PathBuf};

/// `edit-project` options.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("change").required(true).multiple(true)))]
pub struct EditProjectArgs {
    /// Project id.
    #[arg(add = crate::cli::complete::project())]
    pub id: String,
    /// The project's new working directory (jobs run there). A research document that was
    /// the default (<old directory>/CODE_RESEARCH.md) moves with it.
    #[arg(long, group = "change", value_hint = clap::ValueHint::DirPath)]
    pub directory: Option<PathBuf>,
    /// The file research-code writes.
    #[arg(long, group = "change", value_hint = clap::ValueHint::FilePath)]
    pub code_research_document: Option<PathBuf>,
    /// A git remote (a remote's name, a URL, or a path such as a bare repository) each task's
    /// branch and the integration branch are pushed to after they commit; "" pushes nowhere
    /// (the default: nothing is pushed unless configured).
    #[arg(long, group = "change", value_name = "REMOTE")]
    pub push_remote: Option<String>,
}

/// The default research document of a project in `dir`.
fn default_document(dir: &Path) -> String {
    dir.join("CODE_RESEARCH.md").display().to_string()
}

/// Sets the project's research document to `doc`, noting the change when there is one.
fn set_document(
    project: &mut crate::model::Project,
    doc: String,
    changed: &mut Vec<(&'static str, String, String)>,
) {
    if project.code_research_document.as_deref() != Some(doc.as_str()) {
        changed.push((
            "code_research_document",
            project.code_research_document.clone().unwrap_or_default(),
            doc.clone(),
        ));
        project.code_research_document = Some(doc);
    }
}

/// `orchestrator edit-project`.
pub(super) fn edit_project(g: &GlobalArgs, out: &mut dyn Write, a: EditProjectArgs) -> CliResult {
    let store = open_store(g)?;
    let who = super::browse::caller(&store)?;
    let mut project = crate::permissions::project_to_change(&store, &who, &a.id)?;
    let mut changed: Vec<(&'static str, String, String)> = Vec::new();
    let mut new_dir = None;
    if let Some(d) = &a.directory {
        let dir = std::path::absolute(d)
            .map_err(|e| CliError::new(format!("--directory {}: {e}", d.display())))?;
        let old = project.directory.clone();
        let was_default = project.code_research_document.as_deref()
            == Some(default_document(Path::new(&old)).as_str());
        project.directory = dir.display().to_string();
        if project.directory != old {
            changed.push(("directory", old.clone(), project.directory.clone()));
        }
        if was_default && a.code_research_document.is_none() {
            set_document(&mut project, default_document(&dir), &mut changed);
        }
        new_dir = Some(dir);
    }
    if let Some(p) = &a.code_research_document {
        let doc = std::path::absolute(p)
            .map_err(|e| CliError::new(format!("--code-research-document {}: {e}", p.display())))?
            .display()
            .to_string();
        set_document(&mut project, doc, &mut changed);
    }
    if let Some(r) = &a.push_remote {
        let r = r.trim();
        if r.starts_with('-') {
            return Err(CliError::new(format!(
                "--push-remote {r:?}: a remote's name, URL or path, not an option"
            )));
        }
        let new = (!r.is_empty()).then(|| r.to_string());
        if project.push_remote != new {
            changed.push((
                "push_remote",
                project
                    .push_remote
                    .clone()
                    .unwrap_or_else(|| "(none)".into()),
                new.clone()
                    .unwrap_or_else(|| "(none: nothing is pushed)".into()),
            ));
            project.push_remote = new;
        }
    }
    let path = store.project_path(&project.id);
    if !changed.is_empty() {
        project.update_time = Timestamp::now();
        store.write_doc(DocKind::Project, &path, &project)?;
    }
    if let Some(dir) = &new_dir {
        super::admin::warn_missing_directory(&project.id, dir);
    }
    match g.format {
        Format::Json => write_json(out, &project)?,
        Format::Text => {
            if changed.is_empty() {
                writeln!(
                    out,
                    "Project {} already has that; {} is unchanged",
                    project.id,
                    store.relative(&path).display()
                )?;
            } else {
                writeln!(out, "Updated {}", store.relative(&path).display())?;
                for (field, old, new) in &changed {
                    writeln!(out, "  {field}: {new}")?;
                    writeln!(out, "  {:width$}  (was {old})", "", width = field.len())?;
                }
                if new_dir.is_some() {
                    let width = super::render::terminal_width();
                    for l in super::render::wrap(
                        "New jobs run in the new folder, and so does a retry of a failed job; jobs queued before keep the folder they were queued with.",
                        width,
                    ) {
                        writeln!(out, "{l}")?;
                    }
                }
            }
        }
    }
    Ok(())
}
