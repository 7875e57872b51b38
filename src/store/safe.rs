//! One rule for every path the daemons touch in the store (DESIGN §4): everything is opened,
//! created, renamed and listed *relative to the store root*, and no symbolic link is followed
//! at any component below it.
//!
//! Where the kernel has it, `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` does the walk;
//! elsewhere (kernels before 5.6, seccomp filters returning `ENOSYS`/`EPERM`) every
//! component is opened in turn from the root's descriptor with `O_NOFOLLOW | O_DIRECTORY`,
//! which refuses the same things. `AGENTSTORE_FS_WALK=1` (or [`force_component_walk`])
//! forces the second way, so it is tested too.
//!
//! The root itself may be a link (`~/Dropbox` often is): it is the one path followed. Roots are
//! registered by [`crate::store::Store::open`]; the store's file functions
//! ([`crate::store::read_limited`], [`crate::store::write_atomic`],
//! [`crate::store::append_line_locked`], [`crate::store::move_no_replace`],
//! [`crate::store::scan_dir`], …) apply this rule to every path beneath a registered root, so no
//! call site can forget it. Paths outside every registered root are used as given.

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, OpenHow, RenameFlags, ResolveFlag};
use nix::sys::stat::Mode;
use parking_lot::RwLock;
use std::ffi::CString;
use std::fs::{File, Metadata};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};

/// Limits of the store's append-only logs (`errors.out`, `logs/events-*.jsonl`, daemon
/// logs): when a file would grow past `max_bytes` it is renamed to `<name>.1` (older ones
/// shift to `.2` … `.keep`; the oldest is deleted) and a new file is started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogLimits {
    /// Largest size of one log file, in bytes.
    pub max_bytes: u64,
    /// Rotated files kept beside the current one.
    pub keep: usize,
}

/// Default: 10 MiB per file, 5 rotated files kept (at most 60 MiB per log).
pub const DEFAULT_LOG_LIMITS: LogLimits = LogLimits {
    max_bytes: 10 << 20,
    keep: 5,
};

struct RootEntry {
    root: PathBuf,
    limits: LogLimits,
}

static ROOTS: RwLock<Vec<RootEntry>> = RwLock::new(Vec::new());

/// Registers `root` as a store root: paths beneath it get the no-link rule, and logs beneath
/// it are capped by `limits`. Registering again updates the limits.
pub fn register_root(root: &Path, limits: LogLimits) {
    let mut roots = ROOTS.write();
    let mut add = |root: PathBuf| {
        if let Some(e) = roots.iter_mut().find(|e| e.root == root) {
            e.limits = limits;
        } else {
            roots.push(RootEntry { root, limits });
        }
    };
    add(root.to_path_buf());
    if let Ok(canonical) = std::fs::canonicalize(root)
        && canonical != root
    {
        add(canonical);
    }
}

/// The registered root `path` is beneath (the longest one), the rest of the path, and the
/// root's log limits.
fn split(path: &Path) -> Option<(PathBuf, PathBuf, LogLimits)> {
    let roots = ROOTS.read();
    roots
        .iter()
        .filter(|e| path.starts_with(&e.root))
        .max_by_key(|e| e.root.as_os_str().len())
        .and_then(|e| {
            let rel = path.strip_prefix(&e.root).ok()?;
            Some((e.root.clone(), rel.to_path_buf(), e.limits))
        })
}

/// The log limits for a file: its root's, or the default outside any store.
pub fn log_limits(path: &Path) -> LogLimits {
    split(path).map_or(DEFAULT_LOG_LIMITS, |(_, _, l)| l)
}

const MODE_UNKNOWN: u8 = 0;
const MODE_OPENAT2: u8 = 1;
const MODE_WALK: u8 = 2;
static MODE: AtomicU8 = AtomicU8::new(MODE_UNKNOWN);

/// Forces (or stops forcing) the component-by-component walk instead of `openat2`.
pub fn force_component_walk(on: bool) {
    MODE.store(if on { MODE_WALK } else { MODE_UNKNOWN }, Ordering::Relaxed);
}

fn current_mode() -> u8 {
    let m = MODE.load(Ordering::Relaxed);
    if m != MODE_UNKNOWN {
        return m;
    }
    let walk = std::env::var_os("AGENTSTORE_FS_WALK").is_some_and(|v| v == "1");
    let m = if walk { MODE_WALK } else { MODE_OPENAT2 };
    MODE.store(m, Ordering::Relaxed);
    m
}

/// The error for a link (or a link in the path) met in the store.
#[derive(Debug)]
pub struct LinkRefused {
    /// The path as the caller gave it.
    pub path: PathBuf,
}

impl std::fmt::Display for LinkRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} is a symbolic link or has one in its path; the store never follows links (remove or replace it)",
            self.path.display()
        )
    }
}

impl std::error::Error for LinkRefused {}

/// The error for something that is not a regular file where a document or log should be.
#[derive(Debug)]
pub struct NotRegular {
    /// The path.
    pub path: PathBuf,
}

impl std::fmt::Display for NotRegular {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} is not a regular file (a FIFO, device, socket or folder); not read or written",
            self.path.display()
        )
    }
}

impl std::error::Error for NotRegular {}

/// True when `e` is a refusal of a link or a non-regular file by this module.
pub fn is_refusal(e: &io::Error) -> bool {
    e.get_ref()
        .is_some_and(|i| i.is::<LinkRefused>() || i.is::<NotRegular>())
}

fn refused(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        LinkRefused {
            path: path.to_path_buf(),
        },
    )
}

fn not_regular(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        NotRegular {
            path: path.to_path_buf(),
        },
    )
}

fn cstr(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
}

fn mode_bits(mode: u32) -> Mode {
    Mode::from_bits_truncate(mode)
}

/// Checks the part below the root: plain names only (no `..`, no absolute part).
fn check_rel(full: &Path, rel: &Path) -> io::Result<()> {
    for c in rel.components() {
        match c {
            Component::Normal(_) | Component::CurDir => {}
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{}: '..' is not allowed in a store path", full.display()),
                ));
            }
        }
    }
    Ok(())
}

fn open_root(root: &Path) -> io::Result<OwnedFd> {
    let c = cstr(root)?;
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    Ok(nix::fcntl::open(c.as_c_str(), flags, Mode::empty())?)
}

fn openat_one(dir: BorrowedFd<'_>, name: &Path, flags: OFlag, mode: u32) -> io::Result<OwnedFd> {
    let c = cstr(name)?;
    let flags = flags | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    Ok(nix::fcntl::openat(
        dir,
        c.as_c_str(),
        flags,
        mode_bits(mode),
    )?)
}

fn openat2_beneath(
    dir: BorrowedFd<'_>,
    rel: &Path,
    flags: OFlag,
    mode: u32,
) -> io::Result<OwnedFd> {
    let c = cstr(rel)?;
    let mut how = OpenHow::new()
        .flags(flags | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC)
        .resolve(
            ResolveFlag::RESOLVE_BENEATH
                | ResolveFlag::RESOLVE_NO_SYMLINKS
                | ResolveFlag::RESOLVE_NO_MAGICLINKS,
        );
    if flags.contains(OFlag::O_CREAT) {
        how = how.mode(mode_bits(mode));
    }
    Ok(nix::fcntl::openat2(dir, c.as_c_str(), how)?)
}

/// Opens `rel` (plain names, no `..`) below `dir` with no link followed at any component.
fn open_beneath(
    dir: BorrowedFd<'_>,
    full: &Path,
    rel: &Path,
    flags: OFlag,
    mode: u32,
) -> io::Result<OwnedFd> {
    let names: Vec<&std::ffi::OsStr> = rel
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n),
            _ => None,
        })
        .collect();
    let map = |e: io::Error| -> io::Error {
        match e.raw_os_error() {
            Some(libc::ELOOP) | Some(libc::EXDEV) => refused(full),
            // A link where a folder is expected gives ENOTDIR: say what it really is.
            Some(libc::ENOTDIR) if has_link(dir, &names) => refused(full),
            _ => e,
        }
    };
    if names.is_empty() {
        return openat_one(dir, Path::new("."), flags, mode).map_err(map);
    }
    if current_mode() == MODE_OPENAT2 {
        let joined: PathBuf = names.iter().collect();
        match openat2_beneath(dir, &joined, flags, mode) {
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSYS) | Some(libc::EPERM)) => {
                // No openat2 here (old kernel or a seccomp filter): walk from now on.
                MODE.store(MODE_WALK, Ordering::Relaxed);
            }
            other => return other.map_err(map),
        }
    }
    let mut cur: Option<OwnedFd> = None;
    for (i, name) in names.iter().enumerate() {
        let at = cur.as_ref().map_or(dir, |f| f.as_fd());
        let last = i + 1 == names.len();
        let next = if last {
            openat_one(at, Path::new(name), flags, mode)
        } else {
            openat_one(at, Path::new(name), OFlag::O_RDONLY | OFlag::O_DIRECTORY, 0).map_err(|e| {
                // A link where a folder should be: ELOOP; a file there: ENOTDIR.
                if e.raw_os_error() == Some(libc::ENOTDIR) && is_link_at(at, Path::new(name)) {
                    refused(full)
                } else {
                    e
                }
            })
        };
        cur = Some(next.map_err(map)?);
    }
    cur.ok_or_else(|| io::Error::other("empty path"))
}

/// True when a prefix of `names` below `dir` is a link (checked in order, so no link is
/// followed before it is seen).
fn has_link(dir: BorrowedFd<'_>, names: &[&std::ffi::OsStr]) -> bool {
    let mut prefix = PathBuf::new();
    for n in names {
        prefix.push(n);
        match fstatat_nofollow(dir, &prefix) {
            Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFLNK => return true,
            Ok(_) => {}
            Err(_) => return false,
        }
    }
    false
}

fn is_link_at(dir: BorrowedFd<'_>, name: &Path) -> bool {
    fstatat_nofollow(dir, name).is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFLNK)
}

fn fstatat_nofollow(dir: BorrowedFd<'_>, name: &Path) -> io::Result<libc::stat> {
    let c = cstr(name)?;
    Ok(nix::sys::stat::fstatat(
        dir,
        c.as_c_str(),
        AtFlags::AT_SYMLINK_NOFOLLOW,
    )?)
}

/// A path beneath a registered root, resolved to its root's descriptor.
struct Resolved {
    root_fd: OwnedFd,
    rel: PathBuf,
    full: PathBuf,
}

fn resolve(path: &Path) -> io::Result<Option<Resolved>> {
    let Some((root, rel, _)) = split(path) else {
        return Ok(None);
    };
    check_rel(path, &rel)?;
    let root_fd = open_root(&root)?;
    Ok(Some(Resolved {
        root_fd,
        rel,
        full: path.to_path_buf(),
    }))
}

impl Resolved {
    fn parent_and_name(&self) -> io::Result<(PathBuf, PathBuf)> {
        let name = self.rel.file_name().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}: not a file path", self.full.display()),
            )
        })?;
        let parent = self.rel.parent().unwrap_or(Path::new("")).to_path_buf();
        Ok((parent, PathBuf::from(name)))
    }

    /// The folder holding the path (opened with no link followed) and the last name, for the
    /// `*at` calls that take two of them (rename, link).
    fn parent_dir_and_name(&self) -> io::Result<(OwnedFd, CString)> {
        let (parent, name) = self.parent_and_name()?;
        Ok((self.dir(&parent, false)?, cstr(&name)?))
    }

    fn open(&self, rel: &Path, flags: OFlag, mode: u32) -> io::Result<OwnedFd> {
        open_beneath(self.root_fd.as_fd(), &self.full, rel, flags, mode)
    }

    /// Opens (creating, when asked, every missing folder of) the folder `rel`.
    fn dir(&self, rel: &Path, create: bool) -> io::Result<OwnedFd> {
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY;
        match self.open(rel, flags, 0) {
            Err(e) if create && e.kind() == io::ErrorKind::NotFound => {}
            other => return other,
        }
        let mut cur = open_beneath(self.root_fd.as_fd(), &self.full, Path::new(""), flags, 0)?;
        for c in rel.components() {
            let Component::Normal(name) = c else { continue };
            let name = Path::new(name);
            let cn = cstr(name)?;
            // EEXIST is expected and fine.
            let made = match nix::sys::stat::mkdirat(cur.as_fd(), cn.as_c_str(), mode_bits(0o755)) {
                Ok(()) => true,
                Err(Errno::EEXIST) => false,
                Err(e) => return Err(e.into()),
            };
            let next =
                openat_one(cur.as_fd(), name, flags, 0).map_err(|e| match e.raw_os_error() {
                    Some(libc::ELOOP) => refused(&self.full),
                    Some(libc::ENOTDIR) if is_link_at(cur.as_fd(), name) => refused(&self.full),
                    _ => e,
                })?;
            if made {
                give_to_folder_owner(cur.as_fd(), next.as_fd());
            }
            cur = next;
        }
        Ok(cur)
    }
}

/// A file or folder root just made in a store folder owned by someone else (the packaged
/// store belongs to `agentstore`) is given to that folder's owner, so root never leaves
/// entries the store's own account cannot append to or replace. Only an entry owned by root
/// with one name (`st_nlink` 1 for a file) is given away: a hard link to a file elsewhere is
/// never touched. Best effort: without the right to chown nothing changes.
fn give_to_folder_owner(dir: BorrowedFd<'_>, fd: BorrowedFd<'_>) {
    if !nix::unistd::geteuid().is_root() {
        return;
    }
    let (Ok(d), Ok(f)) = (nix::sys::stat::fstat(dir), nix::sys::stat::fstat(fd)) else {
        return;
    };
    let is_dir = f.st_mode & libc::S_IFMT == libc::S_IFDIR;
    if d.st_uid == 0 || f.st_uid != 0 || (!is_dir && f.st_nlink != 1) {
        return;
    }
    let _ = nix::unistd::fchown(
        fd,
        Some(nix::unistd::Uid::from_raw(d.st_uid)),
        Some(nix::unistd::Gid::from_raw(d.st_gid)),
    );
}

fn check_regular(f: &File, path: &Path) -> io::Result<Metadata> {
    let m = f.metadata()?;
    if m.file_type().is_file() {
        Ok(m)
    } else {
        Err(not_regular(path))
    }
}

/// Opens a regular file for reading (never a link, never a FIFO or device). A file that a
/// sync engine is replacing at this instant (removed, its new version not yet renamed into
/// place) is waited for, up to [`super::replacing::REPLACE_WAIT`]: see
/// [`super::replacing`].
pub fn open_read(path: &Path) -> io::Result<File> {
    let mut deadline = None;
    loop {
        match open_read_once(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let until = *deadline.get_or_insert_with(|| {
                    std::time::Instant::now() + super::replacing::REPLACE_WAIT
                });
                if std::time::Instant::now() >= until || !super::replacing::being_replaced(path) {
                    return Err(e);
                }
                std::thread::sleep(super::replacing::REPLACE_POLL);
            }
            r => return r,
        }
    }
}

fn open_read_once(path: &Path) -> io::Result<File> {
    let f = match resolve(path)? {
        Some(r) => File::from(r.open(&r.rel, OFlag::O_RDONLY | OFlag::O_NONBLOCK, 0)?),
        None => {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(path)?
        }
    };
    check_regular(&f, path)?;
    Ok(f)
}

/// What a path is, without following a link at any component (`lstat` beneath the root).
pub fn symlink_metadata(path: &Path) -> io::Result<Metadata> {
    match resolve(path)? {
        Some(r) => {
            let (parent, name) = r.parent_and_name()?;
            let dir = r.dir(&parent, false)?;
            let fd = openat_one(dir.as_fd(), &name, OFlag::O_PATH, 0)?;
            File::from(fd).metadata()
        }
        None => std::fs::symlink_metadata(path),
    }
}

/// True when `path` is a regular file reached with no link followed.
pub fn is_file(path: &Path) -> bool {
    symlink_metadata(path).is_ok_and(|m| m.file_type().is_file())
}

/// True when `path` is a folder reached with no link followed.
pub fn is_dir(path: &Path) -> bool {
    symlink_metadata(path).is_ok_and(|m| m.file_type().is_dir())
}

/// True when something (a link counts) is at `path`.
pub fn exists(path: &Path) -> bool {
    symlink_metadata(path).is_ok()
}

/// Creates `dir` and its missing parents; a link on the way is refused.
pub fn create_dir_all(dir: &Path) -> io::Result<()> {
    match resolve(dir)? {
        Some(r) => r.dir(&r.rel, true).map(drop),
        None => std::fs::create_dir_all(dir),
    }
}

/// Fails when `dir` is a link (or, beneath a store root, has one in its path). Outside every
/// store the folder itself is checked, since the system's own links (`/home` → …) above it
/// are not the store's to judge.
pub fn refuse_linked_dir(dir: &Path) -> io::Result<()> {
    if split(dir).is_some() {
        return open_dir(dir).map(drop);
    }
    let m = std::fs::symlink_metadata(dir)?;
    if m.file_type().is_symlink() {
        return Err(refused(dir));
    }
    if !m.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::NotADirectory,
            format!("{} is not a folder", dir.display()),
        ));
    }
    Ok(())
}

/// Opens a folder for listing or as a base for `*at` calls; a link is refused.
pub fn open_dir(dir: &Path) -> io::Result<OwnedFd> {
    match resolve(dir)? {
        Some(r) => r.dir(&r.rel, false),
        None => open_root(dir),
    }
}

/// One entry of a folder, as listed (links are reported, not followed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// File name.
    pub name: std::ffi::OsString,
    /// What it is.
    pub kind: EntryKind,
}

/// The kind of a folder entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A folder.
    Dir,
    /// A symbolic link.
    Symlink,
    /// A FIFO, socket or device.
    Other,
}

/// Lists `dir` (a link in its path is refused).
pub fn list_dir(dir: &Path) -> io::Result<Vec<DirEntry>> {
    let mut out = Vec::new();
    for_each_entry(dir, |name, kind| {
        out.push(DirEntry {
            name: name.to_os_string(),
            kind,
        })
    })?;
    Ok(out)
}

/// Calls `f` with each entry of `dir` as it is read (a link in its path is refused): a
/// folder of any size costs one name at a time.
pub fn for_each_entry(
    dir: &Path,
    mut f: impl FnMut(&std::ffi::OsStr, EntryKind),
) -> io::Result<()> {
    use nix::dir::Type;
    let fd = open_dir(dir)?;
    let probe = fd.try_clone()?;
    let mut stream = nix::dir::Dir::from_fd(fd)?;
    for ent in stream.iter() {
        let ent = ent?;
        let name = std::ffi::OsStr::from_bytes(ent.file_name().to_bytes());
        if name == "." || name == ".." {
            continue;
        }
        let kind = match ent.file_type() {
            Some(Type::File) => EntryKind::File,
            Some(Type::Directory) => EntryKind::Dir,
            Some(Type::Symlink) => EntryKind::Symlink,
            None => match fstatat_nofollow(probe.as_fd(), Path::new(name)) {
                Ok(st) => match st.st_mode & libc::S_IFMT {
                    libc::S_IFREG => EntryKind::File,
                    libc::S_IFDIR => EntryKind::Dir,
                    libc::S_IFLNK => EntryKind::Symlink,
                    _ => EntryKind::Other,
                },
                Err(_) => continue,
            },
            Some(_) => EntryKind::Other,
        };
        f(name, kind);
    }
    Ok(())
}

/// Creates `path` exclusively (`O_CREAT | O_EXCL`, never through a link) for writing.
pub fn create_new(path: &Path, mode: u32) -> io::Result<File> {
    match resolve(path)? {
        Some(r) => {
            let (parent, name) = r.parent_and_name()?;
            let dir = r.dir(&parent, false)?;
            let fd = openat_one(
                dir.as_fd(),
                &name,
                OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL,
                mode,
            )?;
            give_to_folder_owner(dir.as_fd(), fd.as_fd());
            Ok(File::from(fd))
        }
        None => {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(mode)
                .custom_flags(libc::O_NOFOLLOW)
                .open(path)
        }
    }
}

/// Opens `path` for appending (created if missing, with its folders); a link or a non-regular
/// file is refused.
pub fn open_append(path: &Path) -> io::Result<File> {
    let f = match resolve(path)? {
        Some(r) => {
            let (parent, name) = r.parent_and_name()?;
            let dir = r.dir(&parent, true)?;
            let fd = openat_one(
                dir.as_fd(),
                &name,
                OFlag::O_WRONLY | OFlag::O_APPEND | OFlag::O_CREAT | OFlag::O_NONBLOCK,
                0o644,
            )
            .map_err(|e| {
                if e.raw_os_error() == Some(libc::ELOOP) {
                    refused(path)
                } else {
                    e
                }
            })?;
            let f = File::from(fd);
            if f.metadata().is_ok_and(|m| m.file_type().is_file()) {
                give_to_folder_owner(dir.as_fd(), f.as_fd());
            }
            f
        }
        None => {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
                .open(path)
                .map_err(|e| {
                    if e.raw_os_error() == Some(libc::ELOOP) {
                        refused(path)
                    } else {
                        e
                    }
                })?
        }
    };
    check_regular(&f, path)?;
    Ok(f)
}

fn rename_flags(from: &Path, to: &Path, flags: RenameFlags) -> io::Result<()> {
    use nix::fcntl::{AT_FDCWD, renameat2};
    let (rf, rt) = match (resolve(from)?, resolve(to)?) {
        (Some(rf), Some(rt)) => (rf, rt),
        _ => return Ok(renameat2(AT_FDCWD, from, AT_FDCWD, to, flags)?),
    };
    let ((fdir, cf), (tdir, ct)) = (rf.parent_dir_and_name()?, rt.parent_dir_and_name()?);
    Ok(renameat2(
        &fdir,
        cf.as_c_str(),
        &tdir,
        ct.as_c_str(),
        flags,
    )?)
}

/// Renames `from` to `to` (replacing `to`), both beneath the root with no link followed.
pub fn rename(from: &Path, to: &Path) -> io::Result<()> {
    rename_flags(from, to, RenameFlags::empty())
}

/// Renames `from` to `to`, failing with `AlreadyExists` when `to` exists.
pub fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
    match rename_flags(from, to, RenameFlags::RENAME_NOREPLACE) {
        Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::ENOSYS)) => {
            // Filesystems without RENAME_NOREPLACE: check, then rename.
            if exists(to) {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{} already exists", to.display()),
                ));
            }
            rename(from, to)
        }
        other => other,
    }
}

/// Makes `to` a second name of the file `from` (`linkat` without following a link, both
/// beneath the root with no link followed on the way); fails with `AlreadyExists` when `to`
/// exists. The atomic create-whole of the orchestrator lock.
pub fn hard_link(from: &Path, to: &Path) -> io::Result<()> {
    let (rf, rt) = match (resolve(from)?, resolve(to)?) {
        (Some(rf), Some(rt)) => (rf, rt),
        _ => return std::fs::hard_link(from, to),
    };
    let ((fdir, cf), (tdir, ct)) = (rf.parent_dir_and_name()?, rt.parent_dir_and_name()?);
    // No AT_SYMLINK_FOLLOW: the link itself, never its target.
    Ok(nix::unistd::linkat(
        &fdir,
        cf.as_c_str(),
        &tdir,
        ct.as_c_str(),
        AtFlags::empty(),
    )?)
}

/// Adds an inotify watch on the folder `dir`, never through a link: a link at any component
/// beneath the store root is refused first ([`open_dir`]), and the watch itself is added with
/// `IN_DONT_FOLLOW | IN_ONLYDIR`, so a link (or a file) swapped in at the last moment is not
/// watched either.
pub fn watch_dir(
    watches: &mut inotify::Watches,
    dir: &Path,
    mask: inotify::WatchMask,
) -> io::Result<inotify::WatchDescriptor> {
    refuse_linked_dir(dir)?;
    use inotify::WatchMask as W;
    watches.add(dir, mask | W::DONT_FOLLOW | W::ONLYDIR)
}

/// Removes a file (a link is removed, not followed).
pub fn remove_file(path: &Path) -> io::Result<()> {
    match resolve(path)? {
        Some(r) => {
            let (parent, name) = r.parent_and_name()?;
            let dir = r.dir(&parent, false)?;
            let c = cstr(&name)?;
            use nix::unistd::UnlinkatFlags;
            Ok(nix::unistd::unlinkat(
                &dir,
                c.as_c_str(),
                UnlinkatFlags::NoRemoveDir,
            )?)
        }
        None => std::fs::remove_file(path),
    }
}

/// fsyncs the folder `dir`.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::from(open_dir(dir)?).sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn both(f: impl Fn()) {
        force_component_walk(false);
        f();
        force_component_walk(true);
        f();
        force_component_walk(false);
    }

    #[test]
    fn links_are_refused_at_every_component_both_ways() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("store");
        let outside = d.path().join("outside");
        std::fs::create_dir_all(root.join("a")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret.json"), "secret").unwrap();
        symlink(&outside, root.join("dirlink")).unwrap();
        symlink(outside.join("secret.json"), root.join("a/file.json")).unwrap();
        register_root(&root, DEFAULT_LOG_LIMITS);
        both(|| {
            for p in [root.join("dirlink/secret.json"), root.join("a/file.json")] {
                let e = open_read(&p).unwrap_err();
                assert!(is_refusal(&e), "{p:?}: {e}");
                let e = open_append(&p).unwrap_err();
                assert!(is_refusal(&e), "{p:?}: {e}");
            }
            let e = create_dir_all(&root.join("dirlink/x")).unwrap_err();
            assert!(is_refusal(&e), "{e}");
            assert!(list_dir(&root.join("dirlink")).is_err());
            let e = rename(&root.join("dirlink/secret.json"), &root.join("a/x.json")).unwrap_err();
            assert!(is_refusal(&e), "{e}");
            assert!(!is_file(&root.join("a/file.json")));
            assert!(exists(&root.join("a/file.json")));
            let e = open_read(&root.join("a/../a/file.json")).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        });
        assert_eq!(
            std::fs::read_to_string(outside.join("secret.json")).unwrap(),
            "secret"
        );
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 1);
    }

    #[test]
    fn plain_files_work_both_ways() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("store");
        std::fs::create_dir_all(&root).unwrap();
        register_root(&root, DEFAULT_LOG_LIMITS);
        both(|| {
            let dir = root.join("x/y");
            create_dir_all(&dir).unwrap();
            let p = dir.join("a.json");
            {
                use std::io::Write;
                open_append(&p).unwrap().write_all(b"hi\n").unwrap();
            }
            let mut s = String::new();
            use std::io::Read;
            open_read(&p).unwrap().read_to_string(&mut s).unwrap();
            assert_eq!(s, "hi\n");
            rename_noreplace(&p, &dir.join("b.json")).unwrap();
            let names: Vec<_> = list_dir(&dir)
                .unwrap()
                .into_iter()
                .map(|e| e.name)
                .collect();
            assert_eq!(names, vec![std::ffi::OsString::from("b.json")]);
            remove_file(&dir.join("b.json")).unwrap();
            assert!(!exists(&dir.join("b.json")));
        });
    }

    #[test]
    fn fifo_is_not_opened_for_reading() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("store");
        std::fs::create_dir_all(&root).unwrap();
        register_root(&root, DEFAULT_LOG_LIMITS);
        nix::unistd::mkfifo(&root.join("f.json"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        let e = open_read(&root.join("f.json")).unwrap_err();
        assert!(is_refusal(&e), "{e}");
    }
}
