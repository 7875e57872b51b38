//! Reading a file that a job's account chose (its own or its project's
//! `.claude/commands/<x>.md`, put into a Codex prompt) with that account's rights, never the
//! worker's. A worker started as root would otherwise open whatever the account's symbolic
//! link points at (`~/.claude/commands/x.md -> /etc/shadow`) and hand it to the agent
//! (DESIGN §9: every reader authorized). With an account to switch to, the file is read by
//! `cat` started as that account (its groups, group and user set as for the agent itself);
//! without one (the worker already runs as the job's account) it is read directly.
//! The switch itself is trust::switch's, the one the agent gets.

use std::io::Read;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::process::{Command, Stdio};

use super::runas::RunAs;

/// `cat`, by a path the account cannot change.
fn cat() -> &'static str {
    ["/usr/bin/cat", "/bin/cat"]
        .into_iter()
        .find(|p| Path::new(p).is_file())
        .unwrap_or("/usr/bin/cat")
}

/// The text of `path` read as `account` (see the module's doc), at most `max` bytes: a longer
/// file, one that is not UTF-8, not a regular file or not readable by the account is an error
/// naming the file.
pub fn read_to_string_as(path: &Path, account: Option<&RunAs>, max: u64) -> Result<String, String> {
    let shown = path.display();
    // A FIFO or a device would block the read or never end: only a regular file, or a link
    // to one. (Only the kind is looked at here with the worker's rights; the contents are
    // read with the account's.)
    let kind = std::fs::metadata(path).map_err(|e| format!("{shown}: {e}"))?;
    if !kind.is_file() || kind.file_type().is_fifo() {
        return Err(format!("{shown}: not a regular file"));
    }
    let bytes = match account {
        None => {
            let mut b = Vec::new();
            std::fs::File::open(path)
                .and_then(|f| f.take(max + 1).read_to_end(&mut b))
                .map_err(|e| format!("{shown}: {e}"))?;
            b
        }
        Some(a) => read_with_account(path, a, max)?,
    };
    if bytes.len() as u64 > max {
        return Err(format!("{shown}: more than {max} bytes"));
    }
    String::from_utf8(bytes).map_err(|_| format!("{shown}: not UTF-8 text"))
}

fn read_with_account(path: &Path, a: &RunAs, max: u64) -> Result<Vec<u8>, String> {
    let shown = path.display();
    let mut c = Command::new(cat());
    c.arg("--")
        .arg(path)
        .env_clear()
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // The account's own groups, then its group and user: the one switch (trust::switch).
    crate::trust::switch::run_as(&mut c, a);
    let mut child = c
        .spawn()
        .map_err(|e| format!("{shown}: cannot read it as {}: {e}", a.name))?;
    let mut bytes = Vec::new();
    let read = child
        .stdout
        .take()
        .map(|out| out.take(max + 1).read_to_end(&mut bytes));
    // Past `max` the rest is not wanted: stop cat rather than drain it.
    if bytes.len() as u64 > max {
        let _ = child.kill();
    }
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = (&mut e).take(4096).read_to_string(&mut err);
    }
    let status = child
        .wait()
        .map_err(|e| format!("{shown}: cannot read it as {}: {e}", a.name))?;
    if let Some(Err(e)) = read {
        return Err(format!("{shown}: cannot read it as {}: {e}", a.name));
    }
    if bytes.len() as u64 <= max && !status.success() {
        // cat's own words end with the reason ("…: Permission denied").
        let why = err
            .lines()
            .next()
            .and_then(|l| l.rsplit(": ").next())
            .unwrap_or("cannot be read")
            .trim()
            .to_string();
        return Err(format!("{shown}: {} may not read it: {why}", a.name));
    }
    Ok(bytes)
}
