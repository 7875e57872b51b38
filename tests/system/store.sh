# tests/system/store.sh — helpers for the tests that drive the installed product on the
# system store (/var/lib/agentstore): the PRD's milestones (t_m0…t_m6), t_systemd, t_busctl,
# t_journal, t_twomachines. Sourced after lib.sh; `m` is the machine the helpers act on.
# shellcheck shell=bash disable=SC2034,SC2016,SC2154 # m: set by the test that sources this
AS=/var/lib/agentstore
Q=poplar
REPO=$(cd "$SYS_LIB_DIR/../.." && pwd)

x() { sys_exec "$m" "$@"; }
# As the service user (what the daemon itself would write: group-readable, agentstore-owned),
# the way postinst runs `orchestrator init`.
as_svc() {
    sys_exec "$m" setpriv --reuid=agentstore --regid=agentstore --init-groups \
        env HOME=$AS sh -c 'umask 027; exec "$@"' sh "$@"
}
# The CLI as the store's administrator (agentstore user, files directly).
adm() { as_svc orchestrator --root "$AS" "$@"; }
# Write FILE (inside) from stdin atomically, as the service user.
put() {
    as_svc sh -c 'd=$(dirname "$1"); mkdir -p "$d" && cat >"$d/.put.$$" && mv "$d/.put.$$" "$1"' sh "$1"
}
now() { date -u +%Y-%m-%dT%H:%M:%SZ; }
# jfield FILE NAME — the first "NAME": value in a JSON file (string or scalar; minbase has no jq).
jfield() {
    sys_exec "$m" sh -c "grep -o '\"$2\": *\\(\"[^\"]*\"\\|[^,}]*\\)' '$1' | head -1" |
        sed 's/^[^:]*: *//; s/^"//; s/"[[:space:]]*$//'
}
jobf() { echo "$AS/Queues/${3:-$Q}/Jobs/$2_jobs/$1.json"; } # ID STATE [QUEUE]
in_state() { x test -f "$(jobf "$1" "$2" "${3:-}")"; }
active() { [ "$(x systemctl is-active "$1" 2>/dev/null)" = active ]; }
inactive() {
    local s
    s=$(x systemctl show -p ActiveState --value "$1" 2>/dev/null)
    [ "$s" = inactive ] || [ "$s" = failed ]
}

# Users: chenry (admin, Unix user jobuser: runs the jobs), alice (user role, Unix user alice),
# and mallory, a Unix user with no document in users/.
setup_users() {
    x sh -c 'for u in jobuser alice mallory; do id $u >/dev/null 2>&1 || useradd --create-home --shell /bin/bash $u; done'
    # chenry browses the store's files directly (list-*, view-*): the agentstore group (see the
    # orchestrator unit's notes); alice and mallory only reach it over D-Bus.
    x usermod -aG agentstore jobuser
    adm add-user chenry --name "Chris Henry" --email chenry@example.org --permissions admin --unix-user jobuser >/dev/null
    adm add-user alice --name Alice --email alice@example.org --permissions user --unix-user alice >/dev/null
}

# project ID DIR [QUEUE] [RESEARCH_DOC] — a project owned by chenry.
setup_project() {
    local doc=${4:-null}
    [ "$doc" = null ] || doc="\"$doc\""
    x sh -c "mkdir -p '$2' && chown jobuser: '$2'"
    put "$AS/projects/$1/project.json" <<EOT
{"id": "$1", "directory": "$2", "git_repository": "https://github.com/test/test",
 "create_time": "$(now)", "update_time": "$(now)", "description": "Test project",
 "owner": "chenry", "collaborators": [], "code_research_document": $doc,
 "default_queue": "${3:-$Q}"}
EOT
}

# queue_json ID WORKERS CLAUDE_PATH [DEFAULT_ARGS_JSON]
queue_json() {
    cat <<EOT
{"config": {"id": "$1", "worker_count": $2, "claude_cli_path": "$3", "rest_interval": 60,
  "claude_default_args": ${4:-[\"-p\"]}, "max_job_runtime_seconds": 3600, "launcher": "systemd",
  "resource_limits": {"memory_max": "1G", "cpu_quota": "100%", "tasks_max": 200}},
 "runtime": {"process_id": null, "active_jobs": 0, "last_update": null, "queued_jobs": 0}}
EOT
}
# allow_claude PATH — /etc/agentstore/config.yaml (root's) lists PATH as a program a queue's
# claude_cli_path may name (issue 27: a queue only chooses among the machine's programs).
# The list is the file's last section: entries are appended at its end.
allow_claude() {
    x sh -c 'f=/etc/agentstore/config.yaml; grep -q "^programs:" "$f" || printf "\nprograms:\n  claude:\n" >>"$f"; grep -qF "    - \"$1\"" "$f" || printf "    - \"%s\"\n" "$1" >>"$f"' sh "$1"
}
setup_queue() { # ID WORKERS [CLAUDE_PATH] [DEFAULT_ARGS_JSON]
    case "${3:-claude}" in claude) ;; *) allow_claude "$3" ;; esac
    as_svc sh -c "mkdir -p $AS/Queues/$1/Jobs/queued_jobs $AS/Queues/$1/Jobs/running_jobs $AS/Queues/$1/Jobs/finished_jobs $AS/Queues/$1/Jobs/failed_jobs"
    queue_json "$1" "$2" "${3:-claude}" "${4:-}" | put "$AS/Queues/$1/queue.json"
}

# job_json PROJECT JOBTYPE COMMAND TASK TIMEOUT SUPPORTING_JSON [WORKDIR]
job_json() {
    cat <<EOT
{"config": {"project": "$1", "working_directory": "${7:-/tmp}", "queue_time": "$(now)",
  "jobtype": "$2", "claude_command": "$3", "claude_extra_args": [], "task_description": "$4",
  "supporting_data": $6, "timeout_seconds": $5},
 "runtime": {"status": "queued", "start_time": null, "finish_time": null, "process_id": null,
  "llm_process_id": null, "error": null, "output": null}}
EOT
}
queue_job() { put "$(jobf "$1" queued "${3:-}")" <<<"$2"; } # ID JSON [QUEUE]

# message ID COMMAND [PROJECT] [CONTENT_JSON] [USER] — a PRD §4.2 inbox message.
message() {
    local p=${3:-null} u=${5:-null} c=${4:-}
    [ -n "$c" ] || c='{}'
    [ "$p" = null ] || p="\"$p\""
    [ "$u" = null ] || u="\"$u\""
    cat <<EOT
{"correlation_id": "$1", "source": "user", "project": $p, "queue_time": "$(now)",
 "processed_time": null, "command": "$2", "content": $c, "status": "queued",
 "error": null, "user": $u}
EOT
}

# The real Claude Code CLI and the fake Anthropic endpoint, inside machine $m.
claude_host_binary() {
    local c
    c=${AGENTSTORE_TEST_CLAUDE:-$(command -v claude 2>/dev/null || true)}
    [ -n "$c" ] && readlink -f "$c"
}
fake_anthropic_binary() { echo "$REPO/target/release/examples/fake_anthropic"; }
fake_slack_binary() { echo "$REPO/target/release/examples/fake_slack"; }
# install_claude_env SCRIPT_JSON — copies claude + fake_anthropic in, starts the fake as
# fake-anthropic.service on 127.0.0.1:18555 (loopback of the container), and gives
# queue-manager@.service the environment claude needs (DESIGN §7).
install_claude_env() {
    local root c f
    root=$(sys_root "$m")
    c=$(claude_host_binary) || true
    f=$(fake_anthropic_binary)
    if [ -z "$c" ] || [ ! -x "$c" ]; then sys_die "the real Claude Code CLI is not installed on the host (bash .ci/install-claude.sh)"; fi
    [ -x "$f" ] || sys_die "$f is missing: cargo build --release --example fake_anthropic (run.sh builds it)"
    cp "$c" "$root/usr/local/bin/claude"
    cp "$f" "$root/usr/local/bin/fake_anthropic"
    printf '%s' "$1" >"$root/var/tmp/script.json"
    x systemd-run --unit fake-anthropic --property=Type=exec /usr/local/bin/fake_anthropic \
        --listen 127.0.0.1:18555 --script /var/tmp/script.json --log /var/tmp/anthropic.jsonl >/dev/null 2>&1
    sys_wait_until 20 "the fake Anthropic endpoint" x bash -c 'exec 3<>/dev/tcp/127.0.0.1/18555' ||
        sys_die "fake_anthropic did not listen"
    x mkdir -p /etc/systemd/system/queue-manager@.service.d
    printf '[Service]\nEnvironment=ANTHROPIC_BASE_URL=http://127.0.0.1:18555 ANTHROPIC_API_KEY=fake CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_AUTOUPDATER=1\n' \
        >"$root/etc/systemd/system/queue-manager@.service.d/claude.conf"
    x systemctl daemon-reload
}
# command_file USER NAME TEXT — ~USER/.claude/commands/NAME.md
command_file() {
    x runuser -u "$1" -- sh -c 'mkdir -p ~/.claude/commands && printf "%s\n" "$2" >~/.claude/commands/$1.md' sh "$2" "$3"
}

# install_hreq — /usr/local/bin/hreq in machine $m (python3: the second image), then
# hreq USER METHOD PATH [BODY [CONTENT_TYPE]] calls the web service on
# /run/agentstore/http.sock as USER (SO_PEERCRED says who) and prints the status code, then
# the body. CONTENT_TYPE defaults to application/json (a dashboard form posts
# application/x-www-form-urlencoded).
install_hreq() {
    cat >"$(sys_root "$m")/usr/local/bin/hreq" <<'EOF_HREQ'
#!/usr/bin/python3
import socket, sys
method, path = sys.argv[1], sys.argv[2]
body = (sys.argv[3] if len(sys.argv) > 3 else "").encode()
ctype = sys.argv[4] if len(sys.argv) > 4 else "application/json"
s = socket.socket(socket.AF_UNIX)
s.settimeout(30)
s.connect("/run/agentstore/http.sock")
head = f"{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n\r\n"
s.sendall(head.encode() + body)
data = b""
while True:
    b = s.recv(65536)
    if not b:
        break
    data += b
head, _, body = data.partition(b"\r\n\r\n")
parts = head.split(b" ")
print(parts[1].decode() if len(parts) > 1 else "none")
sys.stdout.write(body.decode(errors="replace"))
EOF_HREQ
    x chmod 755 /usr/local/bin/hreq
}
hreq() { x runuser -u "$1" -- hreq "${@:2}"; } # USER METHOD PATH [BODY [CONTENT_TYPE]]
