//! Where the page is served: loopback TCP on a port the kernel picks, or a private Unix socket.

use std::path::PathBuf;

/// Where the page is served.
pub enum Listener {
    /// 127.0.0.1 on a port chosen by the kernel.
    Tcp(tokio::net::TcpListener),
    /// A Unix socket (mode 0600), removed when the session ends.
    Unix(tokio::net::UnixListener, PathBuf),
}

impl Listener {
    /// Bind 127.0.0.1:0, or `socket` when given (an existing socket file there is replaced;
    /// any other file is an error).
    pub async fn bind(socket: Option<PathBuf>) -> std::io::Result<Self> {
        use std::os::unix::fs::{FileTypeExt, PermissionsExt};
        match socket {
            None => Ok(Self::Tcp(
                tokio::net::TcpListener::bind("127.0.0.1:0").await?,
            )),
            Some(path) => {
                match std::fs::symlink_metadata(&path) {
                    Ok(m) if m.file_type().is_socket() => std::fs::remove_file(&path)?,
                    Ok(_) => {
                        return Err(std::io::Error::new(
                            std::io::ErrorKind::AlreadyExists,
                            format!("{} exists and is not a socket", path.display()),
                        ));
                    }
                    Err(_) => {}
                }
                let listener = tokio::net::UnixListener::bind(&path).map_err(|e| {
                    std::io::Error::new(e.kind(), format!("binding {}: {e}", path.display()))
                })?;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
                Ok(Self::Unix(listener, path))
            }
        }
    }

    /// Where to point a browser (or `curl --unix-socket`), token included.
    pub fn url(&self, token: &str) -> String {
        match self {
            Self::Tcp(l) => match l.local_addr() {
                Ok(addr) => format!("http://{addr}/?token={token}"),
                Err(_) => format!("/?token={token}"),
            },
            Self::Unix(_, path) => {
                format!(
                    "http://localhost/?token={token} (unix socket {})",
                    path.display()
                )
            }
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Self::Unix(_, path) = self {
            let _ = std::fs::remove_file(path);
        }
    }
}
