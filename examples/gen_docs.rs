//! Writes man pages and shell completions for every binary from its clap definition:
//! `cargo run --example gen_docs -- OUT_DIR` → OUT_DIR/man/<bin>.1 and
//! OUT_DIR/completions/{bash/<bin>, zsh/_<bin>, fish/<bin>.fish}. packaging/build-deb.sh runs
//! it before `cargo deb`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "docs/man.rs"]
mod man;

use clap::CommandFactory;
use clap_complete::Shell;
use std::path::{Path, PathBuf};

fn write(out: &Path, mut cmd: clap::Command) -> std::io::Result<()> {
    let name = cmd.get_name().to_string();
    cmd.build();
    let dir = out.join("man");
    std::fs::create_dir_all(&dir)?;
    for (page, text) in man::pages(vec![cmd.clone()])? {
        std::fs::write(dir.join(format!("{page}.1")), text)?;
    }
    for (shell, dir, file) in [
        (Shell::Bash, "bash", name.clone()),
        (Shell::Zsh, "zsh", format!("_{name}")),
        (Shell::Fish, "fish", format!("{name}.fish")),
    ] {
        let d = out.join("completions").join(dir);
        std::fs::create_dir_all(&d)?;
        let mut buf = Vec::new();
        if name == "orchestrator" {
            // Completes project, queue, PRD, user and job ids from the store: the script
            // calls the installed binary back (clap_complete's COMPLETE=<shell> protocol).
            registration(shell, &name, &mut buf)?;
        } else {
            clap_complete::generate(shell, &mut cmd, &name, &mut buf);
        }
        std::fs::write(d.join(file), buf)?;
    }
    println!("{name}: man page and bash/zsh/fish completions");
    Ok(())
}

/// What `COMPLETE=<shell> orchestrator` prints, pointing at the installed binary's name.
fn registration(shell: Shell, name: &str, buf: &mut Vec<u8>) -> std::io::Result<()> {
    use clap_complete::env::EnvCompleter;
    let completer = match shell {
        Shell::Bash => &clap_complete::env::Bash as &dyn EnvCompleter,
        Shell::Zsh => &clap_complete::env::Zsh,
        Shell::Fish => &clap_complete::env::Fish,
        _ => return Err(std::io::Error::other("no registration for this shell")),
    };
    completer.write_registration("COMPLETE", name, name, name, buf)
}

fn main() -> std::io::Result<()> {
    let out = PathBuf::from(std::env::args().nth(1).unwrap_or_else(|| "target".into()));
    write(&out, agentstore::cli::Cli::command())?;
    write(&out, agentstore::orchestrator::daemon::Args::command())?;
    write(&out, agentstore::agent::cli::Cli::command())?;
    write(&out, agentstore::queue::args::Args::command())?;
    write(&out, agentstore::worker::args::Args::command())?;
    write(&out, agentstore::web::args::Args::command())?;
    write(&out, agentstore::notify::args::Args::command())?;
    Ok(())
}
