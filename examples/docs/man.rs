//! Man pages for every binary, from the clap definitions: one page per binary, one per
//! `orchestrator` subcommand (the SUBCOMMANDS section names them), ASCII-only roff (no
//! "can't find special character" under any locale), and the EXAMPLES, FILES and ENVIRONMENT
//! sections a Linux manual has. Used by `examples/gen_docs.rs` (the package's pages) and by
//! the test that renders each page with groff's warnings as errors.

use std::fmt::Write as _;

/// Each page: (file stem, roff text).
pub fn pages(cmds: Vec<clap::Command>) -> std::io::Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for mut cmd in cmds {
        let name = cmd.get_name().to_string();
        cmd.build();
        out.push((name.clone(), render(&cmd, &extra(&name))?));
        subpages(&cmd, &name, &name, &mut out)?;
    }
    Ok(out)
}

/// The pages of `cmd`'s subcommands, and theirs: `<page>-<sub>`, shown as `<shown> <sub>`.
fn subpages(
    cmd: &clap::Command,
    page: &str,
    shown: &str,
    out: &mut Vec<(String, String)>,
) -> std::io::Result<()> {
    for sub in cmd.get_subcommands() {
        let sub_page = format!("{page}-{}", sub.get_name());
        let sub_shown = format!("{shown} {}", sub.get_name());
        // clap names are &'static str without its `string` feature; a page name lives as
        // long as the program that writes the pages.
        let n: &'static str = sub_page.clone().leak();
        let b: &'static str = sub_shown.clone().leak();
        let s = sub.clone().name(n).bin_name(b);
        let see = format!(".SH \"SEE ALSO\"\n\\fB{}\\fR(1)\n", roff_name(page));
        out.push((sub_page.clone(), render(&s, &see)?));
        subpages(sub, &sub_page, &sub_shown, out)?;
    }
    Ok(())
}

fn roff_name(s: &str) -> String {
    s.replace('-', "\\-")
}

fn render(cmd: &clap::Command, extra: &str) -> std::io::Result<String> {
    let mut buf = Vec::new();
    clap_mangen::Man::new(cmd.clone()).render(&mut buf)?;
    let mut text = String::from_utf8(buf).map_err(std::io::Error::other)?;
    text.push_str(extra);
    Ok(ascii(&text))
}

/// Roff that groff renders in every locale: the few non-ASCII characters of the help texts
/// as groff's own named glyphs or ASCII.
pub fn ascii(roff: &str) -> String {
    let mut out = String::with_capacity(roff.len());
    for c in roff.chars() {
        match c {
            '…' => out.push_str("..."),
            '→' => out.push_str("\\(->"),
            '←' => out.push_str("\\(<-"),
            '—' => out.push_str("\\(em"),
            '–' => out.push_str("\\(en"),
            '§' => out.push_str("section "),
            '×' => out.push_str("\\(mu"),
            '≥' => out.push_str("\\(>="),
            '≤' => out.push_str("\\(<="),
            '‘' | '’' => out.push('\''),
            '“' | '”' => out.push('"'),
            c if c.is_ascii() => out.push(c),
            c => {
                let _ = write!(out, "\\[u{:04X}]", c as u32);
            }
        }
    }
    // clap_mangen's own escapes of the same characters.
    out.replace("\\[u2026]", "...")
        .replace("\\[u2192]", "\\(->")
        .replace("\\[u2014]", "\\(em")
        .replace("\\[u00A7]", "section ")
}

fn section(title: &str, items: &[(&str, &str)]) -> String {
    let mut s = format!(".SH {title}\n");
    for (k, v) in items {
        let _ = write!(s, ".TP\n{}\n{}\n", k.replace('-', "\\-"), v);
    }
    s
}

const COMMON_ENV: &[(&str, &str)] = &[
    (
        "AGENT_STORE_ROOT",
        "The AgentStore folder (else ~/.config/agentstore/config or the mode's default: /var/lib/agentstore system-wide, ~/Dropbox/AgentStore per user).",
    ),
    (
        "AGENTSTORE_MODE",
        "system or user: which deployment the commands and daemons serve (else found from the store and the running services).",
    ),
    (
        "AGENTSTORE_BUS",
        "system, session or none: the D-Bus bus to use (else chosen from the mode).",
    ),
    (
        "AGENTSTORE_HOSTNAME",
        "The name this machine has in the store (heartbeats, per-machine files); else the host name.",
    ),
    (
        "COLUMNS",
        "Width text output is fitted to (else the terminal's, else 80).",
    ),
];

const COMMON_FILES: &[(&str, &str)] = &[
    (
        "/etc/agentstore/config.yaml",
        "System-wide settings (root-owned).",
    ),
    (
        "/var/lib/agentstore",
        "The system-wide AgentStore: users/, projects/, Queues/<queue>/Jobs/, messaging/, logs/.",
    ),
    (
        "~/.orchestrator_config.json",
        "The CLI session: who you are logged in as, the current project and PRD.",
    ),
];

/// (term, text) lines of a section.
type Items = &'static [(&'static str, &'static str)];

/// EXAMPLES, FILES, ENVIRONMENT and SEE ALSO of each binary's page.
fn extra(name: &str) -> String {
    let (examples, files, see): (Items, Items, &str) = match name {
        "orchestrator" => (
            &[
                (
                    "orchestrator demo",
                    "Runs a job end to end on an embedded store, without root.",
                ),
                (
                    "orchestrator setup --project demo --directory ~/src/demo",
                    "Sets this user up in per-user mode: store, user, queue, project, units.",
                ),
                (
                    "orchestrator create-prd --project demo --task 'Add a CLI'",
                    "Queues a Claude Code job that writes a PRD.",
                ),
                (
                    "orchestrator list-jobs --status running",
                    "Jobs that are running now.",
                ),
                (
                    "orchestrator view-job ID --follow 600",
                    "Waits up to 10 minutes for a job to end, then shows it.",
                ),
                (
                    "orchestrator approvals --follow 3600",
                    "Approval requests as they come; answer with orchestrator approve/deny.",
                ),
                (
                    "orchestrator set-queue poplar --approval-rule 'Bash:git status*=allow'",
                    "Lets one command run without asking.",
                ),
            ],
            COMMON_FILES,
            "orchestratord(1), queue-manager(1), agentstore-web(1), agentshell(1) and the orchestrator-COMMAND(1) page of each command",
        ),
        "orchestratord" => (
            &[
                (
                    "systemctl status orchestratord",
                    "Whether the system-wide daemon runs, and its last log lines.",
                ),
                ("journalctl -u orchestratord -f", "Its log, followed."),
                (
                    "busctl --system introspect org.agentstore.Orchestrator1 /org/agentstore/Orchestrator1",
                    "Its D-Bus API.",
                ),
            ],
            COMMON_FILES,
            "orchestrator(1), queue-manager(1)",
        ),
        "queue-manager" => (
            &[
                (
                    "systemctl status queue-manager@poplar",
                    "The manager of queue poplar.",
                ),
                (
                    "queue-manager --queue poplar",
                    "Runs it in the foreground (development).",
                ),
                ("journalctl JOB_ID=ID", "The log of one job."),
            ],
            COMMON_FILES,
            "orchestrator(1), agent-worker(1)",
        ),
        "agent-worker" => (
            &[(
                "journalctl JOB_ID=ID",
                "What a worker logged for one job (queue-manager starts workers; they are not run by hand).",
            )],
            COMMON_FILES,
            "queue-manager(1)",
        ),
        "agentstore-web" => (
            &[
                (
                    "systemctl start agentstore-web.socket",
                    "Serves the dashboard and API on /run/agentstore/http.sock, started on the first connection.",
                ),
                (
                    "orchestrator web",
                    "Prints the dashboard's address and a login link for this user.",
                ),
            ],
            &[
                (
                    "/run/agentstore/http.sock",
                    "The socket systemd listens on (agentstore-web.socket).",
                ),
                (
                    "/etc/agentstore/config.yaml",
                    "System-wide settings (root-owned).",
                ),
            ],
            "orchestrator(1), orchestratord(1)",
        ),
        "agentstore-notify" => (
            &[
                (
                    "systemctl enable --now agentstore-notify",
                    "Delivers notices to Slack, Telegram, e-mail and webhooks (system store).",
                ),
                (
                    "orchestrator notify test --sink slack",
                    "Sends one test notice through a sink with this machine's settings.",
                ),
                (
                    "orchestrator notifications --failed",
                    "What could not be delivered, and why.",
                ),
            ],
            &[
                (
                    "/etc/agentstore/config.yaml",
                    "notify: sinks, endpoints, credential names, defaults, retries (root-owned).",
                ),
                (
                    "STORE/notifications/pending/",
                    "Notices not yet delivered everywhere.",
                ),
                (
                    "STORE/logs/notify-ledger@HOST.jsonl",
                    "What each machine sent, retried or gave up on.",
                ),
            ],
            "orchestrator(1), orchestratord(1)",
        ),
        "agentshell" => (
            &[
                (
                    "agentshell",
                    "An interactive session in the current folder.",
                ),
                (
                    "agentshell exec --json 'fix the failing test'",
                    "One task, headless, one JSON result.",
                ),
            ],
            &[
                (
                    "~/.agentshell/config.json",
                    "Model, endpoint and policy settings.",
                ),
                (
                    "~/.agentshell/.env",
                    "API keys and secrets (0600); never shown to the model.",
                ),
            ],
            "orchestrator(1)",
        ),
        _ => (&[], COMMON_FILES, "orchestrator(1)"),
    };
    let env: Vec<(&str, &str)> = if name == "agentshell" {
        vec![
            ("AGENTSHELL_MODEL", "The model to use."),
            ("AGENTSHELL_BASE_URL", "The provider's endpoint."),
            (
                "AGENTSHELL_API_KEY",
                "The provider's key (else ~/.agentshell/.env).",
            ),
            ("AGENTSHELL_HOME", "Instead of ~/.agentshell."),
        ]
    } else {
        COMMON_ENV.to_vec()
    };
    let mut s = String::new();
    if !examples.is_empty() {
        s.push_str(&section("EXAMPLES", examples));
    }
    s.push_str(&section("FILES", files));
    s.push_str(&section("ENVIRONMENT", &env));
    let _ = write!(s, ".SH \"SEE ALSO\"\n{}\n", see.replace('-', "\\-"));
    s
}
