//! The mount-namespace step of the sandbox: read-only and pinned binds in a private mount
//! namespace (and a user namespace when not root), prepared before fork, entered in the child
//! with system calls only.

use std::ffi::CString;
use std::path::{Path, PathBuf};

use super::SandboxError;

/// The mount-namespace step: made before fork, entered in the child.
#[derive(Debug)]
pub(super) struct Namespace {
    /// `Some((uid_map, gid_map))` when a user namespace is needed (not root).
    user: Option<(CString, CString)>,
    /// Paths to bind onto themselves, whether read-only, and the flags their mounts already
    /// have (kept: a user namespace may not drop `nosuid`, `nodev`…).
    binds: Vec<(CString, bool, libc::c_ulong)>,
    /// Files to hide: `/dev/null` bound over each (reads are empty, writes go nowhere).
    hide: Vec<CString>,
}

impl Namespace {
    pub(super) fn prepare(
        paths: &[(PathBuf, bool)],
        hide: &[PathBuf],
    ) -> Result<Namespace, SandboxError> {
        let uid = nix::unistd::geteuid();
        let gid = nix::unistd::getegid();
        let user = (!uid.is_root()).then(|| {
            (
                CString::new(format!("{uid} {uid} 1\n")).unwrap_or_default(),
                CString::new(format!("{gid} {gid} 1\n")).unwrap_or_default(),
            )
        });
        let mut binds = Vec::new();
        for (p, read_only) in paths {
            let c = c_path(p)?;
            let st = nix::sys::statvfs::statvfs(p).map_err(|source| SandboxError::Statvfs {
                path: p.clone(),
                source,
            })?;
            let f = st.flags();
            use nix::sys::statvfs::FsFlags;
            let mut flags: libc::c_ulong = 0;
            for (have, ms) in [
                (FsFlags::ST_NOSUID, libc::MS_NOSUID),
                (FsFlags::ST_NODEV, libc::MS_NODEV),
                (FsFlags::ST_NOEXEC, libc::MS_NOEXEC),
                (FsFlags::ST_NOATIME, libc::MS_NOATIME),
                (FsFlags::ST_NODIRATIME, libc::MS_NODIRATIME),
                (FsFlags::ST_RELATIME, libc::MS_RELATIME),
            ] {
                if f.contains(have) {
                    flags |= ms;
                }
            }
            binds.push((c, *read_only, flags));
        }
        let hide = hide.iter().map(|p| c_path(p)).collect::<Result<_, _>>()?;
        Ok(Namespace { user, binds, hide })
    }

    /// In the child: unshare, map the ids, make the binds read-only. System calls only.
    pub(super) fn enter(&self) -> std::io::Result<()> {
        let flags = if self.user.is_some() {
            libc::CLONE_NEWUSER | libc::CLONE_NEWNS
        } else {
            libc::CLONE_NEWNS
        };
        check(
            // SAFETY: unshare of the calling (single-threaded, forked) process.
            unsafe { libc::unshare(flags) },
        )?;
        if let Some((uid_map, gid_map)) = &self.user {
            write_proc(c"/proc/self/setgroups", c"deny")?;
            write_proc(c"/proc/self/uid_map", uid_map)?;
            write_proc(c"/proc/self/gid_map", gid_map)?;
        }
        // No mount event of ours reaches the parent's namespace.
        check(
            // SAFETY: mount with static C strings; changes only our own mount namespace.
            unsafe {
                libc::mount(
                    std::ptr::null(),
                    c"/".as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                )
            },
        )?;
        for (path, read_only, flags) in &self.binds {
            check(
                // SAFETY: bind-mount a path onto itself in our own namespace; the C string
                // was made before the fork.
                unsafe {
                    libc::mount(
                        path.as_ptr(),
                        path.as_ptr(),
                        std::ptr::null(),
                        libc::MS_BIND | libc::MS_REC,
                        std::ptr::null(),
                    )
                },
            )?;
            if !read_only {
                continue;
            }
            check(
                // SAFETY: as above, remounting the new bind read-only.
                unsafe {
                    libc::mount(
                        std::ptr::null(),
                        path.as_ptr(),
                        std::ptr::null(),
                        libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | flags,
                        std::ptr::null(),
                    )
                },
            )?;
        }
        for path in &self.hide {
            check(
                // SAFETY: bind /dev/null over a file in our own namespace; C strings made
                // before the fork.
                unsafe {
                    libc::mount(
                        c"/dev/null".as_ptr(),
                        path.as_ptr(),
                        std::ptr::null(),
                        libc::MS_BIND,
                        std::ptr::null(),
                    )
                },
            )?;
        }
        Ok(())
    }
}

fn check(r: libc::c_int) -> std::io::Result<()> {
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// open + write + close, for `/proc/self/*_map` in the child.
fn write_proc(path: &std::ffi::CStr, text: &std::ffi::CStr) -> std::io::Result<()> {
    // SAFETY: open/write/close on C strings made before the fork; no allocation.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let bytes = text.to_bytes();
        let n = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
        let err = std::io::Error::last_os_error();
        libc::close(fd);
        if n < 0 || usize::try_from(n).ok() != Some(bytes.len()) {
            return Err(err);
        }
    }
    Ok(())
}

pub(super) fn c_path(p: &Path) -> Result<CString, SandboxError> {
    CString::new(p.as_os_str().as_encoded_bytes().to_vec())
        .map_err(|_| SandboxError::Path(p.to_path_buf()))
}
