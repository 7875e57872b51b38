//! `create-environment`: runs the user's `venvman` directly (PRD §5.3, §6.2); no job.

use super::RouteError;
use crate::model::{Message, Project};
use serde_json::{Value, json};
use std::process::Command;

/// The program run; `AGENTSTORE_VENVMAN` overrides it (tests, odd installs).
pub fn venvman_program() -> String {
    std::env::var("AGENTSTORE_VENVMAN").unwrap_or_else(|_| "venvman".to_string())
}

/// Runs `venvman create --project=<id> --dir=<directory> [--python=V] [--install-deps]`.
pub fn create_environment(msg: &Message, project: &Project) -> Result<Value, RouteError> {
    let program = venvman_program();
    let mut cmd = Command::new(&program);
    // Values glued to their options (`--dir=-x` stays a value), so nothing from a document
    // can become an option of venvman.
    cmd.args([
        "create".to_string(),
        format!("--project={}", project.id),
        format!("--dir={}", project.directory),
    ]);
    match msg.content.get("python") {
        None | Some(Value::Null) => {}
        Some(Value::String(v)) => {
            cmd.arg(format!("--python={v}"));
        }
        Some(_) => {
            return Err(RouteError::Invalid(
                "content.python must be a string".into(),
            ));
        }
    }
    if msg
        .content
        .get("install_deps")
        .and_then(Value::as_bool)
        .unwrap_or(false)
    {
        cmd.arg("--install-deps");
    }
    let out = cmd.output().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            RouteError::Failed(format!(
                "venvman not installed: `{program}` was not found on PATH (install venvman, then retry)"
            ))
        } else {
            RouteError::Failed(format!("cannot run {program}: {e}"))
        }
    })?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        return Err(RouteError::Failed(format!(
            "venvman failed ({}): {}",
            out.status,
            stderr.trim().lines().last().unwrap_or("no output")
        )));
    }
    Ok(
        json!({"project": project.id, "directory": project.directory, "stdout": stdout, "stderr": stderr}),
    )
}
