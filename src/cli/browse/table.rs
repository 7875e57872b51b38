//! The job tables: cells, headers and a table written row by row (widths measured first),
//! with rows spooled in memory while a D-Bus listing is measured.

use crate::cli::render::Table;
use crate::cli::{CliError, CliResult};
use crate::model::flow::priority_name;
use crate::model::{JobStatus, Timestamp};
use crate::store::listing::Listed;
use std::io::Write;

pub(super) const ARCHIVED_HEADERS: [&str; 6] =
    ["ID", "STATUS", "QUEUE", "PROJECT", "ARCHIVE", "ENDED"];

pub(super) fn archived_cells(l: &Listed) -> [String; 6] {
    [
        l.id.clone(),
        l.status.name().to_string(),
        l.queue.clone(),
        l.head.project.clone(),
        l.month.clone().unwrap_or_default(),
        l.head
            .finish_time
            .map(|f| f.0.format("%Y-%m-%d %H:%M").to_string())
            .unwrap_or_default(),
    ]
}

pub(super) fn job_cells(l: &Listed) -> [String; 6] {
    [
        l.id.clone(),
        l.status.name().to_string(),
        priority_name(l.head.priority),
        l.queue.clone(),
        l.head.project.clone(),
        queued_cell(&l.head.queue_time),
    ]
}

/// Width of the QUEUED cell ("MM-DD HH:MM").
pub(super) const QUEUED_WIDTH: usize = 11;

/// The QUEUED cell, `%m-%d %H:%M` without a format parser per row.
pub(in crate::cli) fn queued_cell(t: &Timestamp) -> String {
    use chrono::{Datelike, Timelike};
    let t = t.0;
    format!(
        "{:02}-{:02} {:02}:{:02}",
        t.month(),
        t.day(),
        t.hour(),
        t.minute()
    )
}

pub(super) const JOB_HEADERS: [&str; 6] =
    ["ID", "STATUS", "PRIORITY", "QUEUE", "PROJECT", "QUEUED"];
/// Left out first when a UUID, the status and the time leave no room (80 columns):
/// PRIORITY, then QUEUE (`--queue` and `view-job` still say them).
pub(super) const JOB_DROPPABLE: [usize; 2] = [2, 3];

/// A table written row by row: widths are measured in a first pass over the rows (cheap
/// cells, not documents), then each line is written as it is made — the same layout as
/// [`crate::cli::render::Table`] without holding every row.
pub(super) struct StreamTable {
    headers: Vec<String>,
    widths: Vec<usize>,
    keep: Vec<usize>,
    droppable: Vec<usize>,
    fitted: Option<Vec<usize>>,
}

impl StreamTable {
    /// `keep`: columns never cut; `droppable`: columns left out, in this order, when the
    /// terminal cannot hold every column at its narrowest.
    pub(super) fn new(headers: &[&str], keep: &[usize], droppable: &[usize]) -> StreamTable {
        StreamTable {
            headers: headers.iter().map(|h| h.to_string()).collect(),
            widths: headers.iter().map(|h| h.chars().count()).collect(),
            keep: keep.to_vec(),
            droppable: droppable.to_vec(),
            fitted: None,
        }
    }

    pub(super) fn measure(&mut self, cells: &[String]) {
        for (w, c) in self.widths.iter_mut().zip(cells) {
            *w = (*w).max(c.chars().count());
        }
    }

    /// [`measure`](Self::measure) from the cells' widths alone.
    pub(super) fn measure_widths(&mut self, widths: &[usize]) {
        for (w, c) in self.widths.iter_mut().zip(widths) {
            *w = (*w).max(*c);
        }
    }

    pub(super) fn fitted(&mut self) -> Vec<usize> {
        if let Some(f) = &self.fitted {
            return f.clone();
        }
        let mut widths = self.widths.clone();
        crate::cli::render::fit_widths(&mut widths, &self.keep, &self.droppable);
        self.fitted = Some(widths.clone());
        widths
    }

    pub(super) fn header(&mut self, out: &mut dyn Write) -> std::io::Result<()> {
        let h = self.headers.clone();
        self.line(out, &h)
    }

    pub(super) fn line(&mut self, out: &mut dyn Write, cells: &[String]) -> std::io::Result<()> {
        if self.fitted.is_none() {
            self.fitted();
        }
        let widths = self.fitted.as_deref().unwrap_or(&[]);
        let mut s = String::with_capacity(96);
        for (i, w) in widths.iter().enumerate() {
            if *w == 0 {
                continue;
            }
            let cell = cells.get(i).map(String::as_str).unwrap_or("");
            let cut = crate::cli::render::fit(cell, *w);
            s.push_str(&cut);
            let pad = w.saturating_sub(cut.chars().count()) + 2;
            s.extend(std::iter::repeat_n(' ', pad));
        }
        s.truncate(s.trim_end().len());
        s.push('\n');
        out.write_all(s.as_bytes())
    }
}

/// One line of the text job listing.
pub(in crate::cli) struct JobRow {
    pub(in crate::cli) id: String,
    pub(in crate::cli) status: JobStatus,
    pub(in crate::cli) priority: Option<i32>,
    pub(in crate::cli) queue: String,
    pub(in crate::cli) project: String,
    pub(in crate::cli) queue_time: Timestamp,
}

/// The text job listing: full ids (users copy them), 80 columns.
pub(in crate::cli) fn jobs_table(out: &mut dyn Write, rows: &[JobRow]) -> CliResult {
    let mut t = Table::new(&JOB_HEADERS)
        .keep(0)
        .keep(1)
        .keep(5)
        .droppable(JOB_DROPPABLE[0])
        .droppable(JOB_DROPPABLE[1]);
    for r in rows {
        t.row(vec![
            r.id.clone(),
            r.status.name().to_string(),
            priority_name(r.priority),
            r.queue.clone(),
            r.project.clone(),
            queued_cell(&r.queue_time),
        ]);
    }
    t.write(out)?;
    Ok(())
}

/// Table rows kept in an anonymous memory file (tab-separated, one per line): no temporary
/// folder is needed to print (one not writable by the caller used to fail the listing);
/// only where `memfd_create` is missing, an unlinked file in the temporary folder.
pub(super) struct Spool {
    file: std::io::BufWriter<std::fs::File>,
}

impl Spool {
    pub(super) fn new() -> Result<Spool, CliError> {
        use nix::sys::memfd::{MFdFlags, memfd_create};
        if let Ok(fd) = memfd_create("agentstore-list-jobs", MFdFlags::MFD_CLOEXEC) {
            return Ok(Spool {
                file: std::io::BufWriter::new(std::fs::File::from(fd)),
            });
        }
        let dir = std::env::temp_dir();
        for n in 0..100u32 {
            let path = dir.join(format!(
                ".agentstore-list-jobs.{}.{n}.tmp",
                std::process::id()
            ));
            match std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(f) => {
                    let _ = std::fs::remove_file(&path);
                    return Ok(Spool {
                        file: std::io::BufWriter::new(f),
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    return Err(CliError::new(format!(
                        "cannot create a temporary file in {}: {e}",
                        dir.display()
                    )));
                }
            }
        }
        Err(CliError::new(format!(
            "cannot create a temporary file in {}",
            dir.display()
        )))
    }

    pub(super) fn push(&mut self, cells: &[String]) -> std::io::Result<()> {
        let mut line = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i > 0 {
                line.push('\t');
            }
            // The table shows controls as spaces anyway.
            line.extend(c.chars().map(|c| if c.is_control() { ' ' } else { c }));
        }
        line.push('\n');
        self.file.write_all(line.as_bytes())
    }

    pub(super) fn replay(
        self,
        mut each: impl FnMut(&[String]) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        use std::io::{BufRead, Seek};
        let mut f = self.file.into_inner().map_err(|e| e.into_error())?;
        f.seek(std::io::SeekFrom::Start(0))?;
        for line in std::io::BufReader::new(f).lines() {
            let cells: Vec<String> = line?.split('\t').map(str::to_string).collect();
            each(&cells)?;
        }
        Ok(())
    }
}
