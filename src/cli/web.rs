//! `orchestrator web`: where the HTTP API and dashboard (agentstore-web) listen, and the
//! dashboard opened in a browser when there is a desktop session.

use super::render::write_json;
use super::{CliResult, Format, GlobalArgs};
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// `orchestrator web` options.
#[derive(Debug, clap::Args)]
pub struct WebArgs {
    /// Only print the URL; do not open a browser.
    #[arg(long)]
    pub no_open: bool,
}

/// The Unix socket of this deployment mode's agentstore-web.socket.
fn socket_path(system: bool) -> PathBuf {
    if system {
        return PathBuf::from("/run/agentstore/http.sock");
    }
    let rt = std::env::var_os("XDG_RUNTIME_DIR")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(format!("/run/user/{}", nix::unistd::getuid().as_raw())));
    rt.join("agentstore/http.sock")
}

/// The loopback TCP listeners of agentstore-web.socket (a drop-in adds them), as systemd
/// reports them (`Listen=`); empty when systemd cannot be asked.
fn tcp_listeners(system: bool) -> Vec<String> {
    let mut c = Command::new("systemctl");
    if !system {
        c.arg("--user");
    }
    let Ok(o) = c
        .args([
            "show",
            "--property=Listen",
            "--value",
            "agentstore-web.socket",
        ])
        .stderr(Stdio::null())
        .output()
    else {
        return Vec::new();
    };
    String::from_utf8_lossy(&o.stdout)
        .split(['\n', ' '])
        .filter(|w| w.parse::<std::net::SocketAddr>().is_ok())
        .map(str::to_string)
        .collect()
}

/// Prints the URLs (and opens the dashboard when a desktop session is there).
pub(super) fn run(g: &GlobalArgs, out: &mut dyn Write, args: &WebArgs) -> CliResult {
    let system = crate::model::system_mode();
    let sock = socket_path(system);
    let tcp = tcp_listeners(system);
    // The user's own token (system mode: the service's, which only an admin can read).
    let token = match (system, crate::store::home_dir()) {
        (false, Some(home)) if !tcp.is_empty() => Some(
            crate::web::auth::load_or_create_token(&crate::web::auth::token_path(&home))
                .map_err(super::CliError::new)?,
        ),
        _ => None,
    };
    let browser_url = tcp.first().map(|a| match &token {
        Some(t) => format!("http://{a}/login?token={t}"),
        None => format!("http://{a}/"),
    });
    let desktop = ["DISPLAY", "WAYLAND_DISPLAY"]
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|x| !x.is_empty()));
    let opened = match &browser_url {
        Some(url) if desktop && !args.no_open => Command::new("xdg-open")
            .arg(url)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success()),
        _ => false,
    };
    match g.format {
        Format::Json => write_json(
            out,
            &serde_json::json!({
                "socket": sock,
                "url": format!("http+unix://{}/", sock.display()),
                "tcp": tcp,
                "browser_url": browser_url,
                "opened": opened,
            }),
        )?,
        Format::Text => {
            writeln!(
                out,
                "API and dashboard on the Unix socket {}",
                sock.display()
            )?;
            writeln!(
                out,
                "  curl --unix-socket {} http://localhost/api/v1/whoami",
                sock.display()
            )?;
            match &browser_url {
                Some(u) => writeln!(out, "Dashboard: {u}")?,
                None => writeln!(
                    out,
                    "For a browser, add a loopback TCP listener (docs/api.md, \"TCP\"): systemctl {}edit agentstore-web.socket",
                    if system { "" } else { "--user " }
                )?,
            }
            if opened {
                writeln!(out, "Opened in the browser (xdg-open).")?;
            }
        }
    }
    Ok(())
}
