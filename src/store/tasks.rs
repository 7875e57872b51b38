//! Task documents (issue 30): `projects/<project>/tasks/<prd>/<task>.json`. A task's file
//! never moves (its state is a field); a PRD's tasks are the documents of its folder.

use super::{Result, Store, StoreError, check_id, io_err, safe, scan_dir};
use crate::model::{DocKind, Task, TaskRef};
use std::path::PathBuf;

impl Store {
    /// `projects/<project>/tasks/<prd>/`.
    pub fn tasks_dir(&self, project: &str, prd: &str) -> PathBuf {
        self.projects_dir().join(project).join("tasks").join(prd)
    }

    /// `projects/<project>/tasks/<prd>/<task>.json`.
    pub fn task_path(&self, project: &str, prd: &str, task: &str) -> PathBuf {
        self.tasks_dir(project, prd).join(format!("{task}.json"))
    }

    /// The tasks of one PRD of `project`, sorted by id. Unreadable documents go to
    /// `on_error`.
    pub fn tasks_of(
        &self,
        project: &str,
        prd: &str,
        on_error: &mut dyn FnMut(StoreError),
    ) -> Result<Vec<Task>> {
        check_id("project", project)?;
        check_id("prd", prd)?;
        let mut out: Vec<Task> =
            self.read_all(DocKind::Task, &self.tasks_dir(project, prd), on_error)?;
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }

    /// The PRD ids of `project` that have task folders.
    pub fn task_prds(&self, project: &str) -> Result<Vec<String>> {
        check_id("project", project)?;
        let dir = self.projects_dir().join(project).join("tasks");
        let entries = match safe::list_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_err(&dir)(e)),
        };
        let mut out: Vec<String> = entries
            .into_iter()
            .filter(|e| e.kind == safe::EntryKind::Dir)
            .filter_map(|e| e.name.to_str().map(str::to_string))
            .filter(|n| crate::model::is_safe_id(n))
            .collect();
        out.sort();
        Ok(out)
    }

    /// One task, found through its PRD (in any project).
    pub fn task(&self, r: &TaskRef) -> Result<(PathBuf, Task)> {
        check_id("prd", &r.prd)?;
        check_id("task", &r.task)?;
        let (_, _, prd) = self.find_prd(&r.prd)?;
        let path = self.task_path(&prd.project, &r.prd, &r.task);
        if !safe::is_file(&path) {
            return Err(StoreError::NotFound {
                kind: "task",
                id: r.to_string(),
            });
        }
        let task = self.read_doc(DocKind::Task, &path)?;
        Ok((path, task))
    }

    /// Whether a PRD has any task documents.
    pub fn has_tasks(&self, project: &str, prd: &str) -> bool {
        scan_dir(&self.tasks_dir(project, prd)).is_ok_and(|s| !s.documents.is_empty())
    }
}
