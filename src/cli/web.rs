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

/// True when agentstore-web.socket is active (or systemd cannot be asked: then the socket may
/// be there all the same, and the paths are printed).
fn socket_active(system: bool) -> bool {
    let mut c = Command::new("systemctl");
    if !system {
        c.arg("--user");
    }
    match c
        .args(["is-active", "agentstore-web.socket"])
        .stderr(Stdio::null())
        .output()
    {
        Ok(o) => {
            let state = String::from_utf8_lossy(&o.stdout).trim().to_string();
            // No manager to ask: say where it would be.
            state == "active" || state.is_empty()
        }
        Err(_) => true,
    }
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

/// The commands that add a loopback TCP listener to agentstore-web (a socket drop-in; the
/// system service also needs to be let onto IP), as a person pastes them.
pub fn tcp_steps(system: bool) -> Vec<String> {
    if system {
        vec![
            "sudo mkdir -p /etc/systemd/system/agentstore-web.socket.d /etc/systemd/system/agentstore-web.service.d".into(),
            r"printf '[Socket]\nListenStream=127.0.0.1:8717\nFileDescriptorName=tcp\n' | sudo tee /etc/systemd/system/agentstore-web.socket.d/tcp.conf".into(),
            r"printf '[Service]\nIPAddressAllow=localhost\nRestrictAddressFamilies=AF_UNIX AF_INET AF_INET6\n' | sudo tee /etc/systemd/system/agentstore-web.service.d/tcp.conf".into(),
            "sudo systemctl daemon-reload && sudo systemctl restart agentstore-web.socket".into(),
        ]
    } else {
        vec![
            "mkdir -p ~/.config/systemd/user/agentstore-web.socket.d".into(),
            r"printf '[Socket]\nListenStream=127.0.0.1:8717\nFileDescriptorName=tcp\n' > ~/.config/systemd/user/agentstore-web.socket.d/tcp.conf".into(),
            "systemctl --user daemon-reload && systemctl --user restart agentstore-web.socket".into(),
        ]
    }
}

/// Prints the URLs (and opens the dashboard when a desktop session is there).
pub(super) fn run(g: &GlobalArgs, out: &mut dyn Write, args: &WebArgs) -> CliResult {
    let system = crate::model::system_mode();
    let sock = socket_path(system);
    let tcp = tcp_listeners(system);
    let listening = socket_active(system);
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
                "listening": listening,
            }),
        )?,
        Format::Text => {
            if !listening {
                let (sudo, user) = if system {
                    ("sudo ", "")
                } else {
                    ("", "--user ")
                };
                let text = format!(
                    "agentstore-web.socket is not active: nothing listens on {} yet. Start it \
                     (and at every boot):",
                    sock.display()
                );
                for l in super::render::wrap(&text, super::render::terminal_width()) {
                    writeln!(out, "{l}")?;
                }
                writeln!(
                    out,
                    "  {sudo}systemctl {user}enable --now agentstore-web.socket"
                )?;
                return Ok(());
            }
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
                None => {
                    writeln!(
                        out,
                        "For a browser, add a loopback TCP listener (once), then run this again:"
                    )?;
                    for l in tcp_steps(system) {
                        writeln!(out, "  {l}")?;
                    }
                }
            }
            if opened {
                writeln!(out, "Opened in the browser (xdg-open).")?;
            }
        }
    }
    Ok(())
}
