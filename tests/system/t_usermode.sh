#!/usr/bin/env bash
# t_usermode: the PRD's own mode (issue 11, DESIGN §8) under a real user manager. A real login
# user (useradd -m) with lingering, its own systemd --user and session bus; as that user:
# `orchestrator setup` makes ~/Dropbox/AgentStore and enables agentstore.target; a job
# submitted with the CLI goes over the SESSION bus to the user's orchestratord, runs in a
# transient scope of the USER manager as that user, leaves its output in the user's store and
# its research document in the project; `journalctl --user` has the daemons' lines; the
# package's /etc/agentstore/config.yaml (/var/lib/agentstore) does not shadow the user's
# store; both daemons exit when idle and their .path units bring them back.
# shellcheck source-path=SCRIPTDIR
# shellcheck disable=SC2016
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
sys_test_begin
[ -n "${SYS_DEB:-}" ] || sys_test_skip "needs the package"
m=$SYS_MACHINE
REPO=$(cd "$SYS_LIB_DIR/../.." && pwd)
x() { sys_exec "$m" "$@"; }

U=rita
x useradd --create-home --shell /bin/bash "$U"
uid=$(x id -u "$U")
H=/home/$U
S=$H/Dropbox/AgentStore
RUN=/run/user/$uid
# The user, in a login-like environment of its own user manager (what a shell in a session
# would have): nothing of root's.
u() {
    x runuser -u "$U" -- env HOME="$H" USER="$U" LOGNAME="$U" XDG_RUNTIME_DIR="$RUN" \
        DBUS_SESSION_BUS_ADDRESS="unix:path=$RUN/bus" "$@"
}
usys() { u systemctl --user "$@"; }
uactive() { [ "$(usys is-active "$1" 2>/dev/null)" = active ]; }
uinactive() {
    local s
    s=$(usys show -p ActiveState --value "$1" 2>/dev/null)
    [ "$s" = inactive ] || [ "$s" = failed ]
}
jobf() { echo "$S/Queues/poplar/Jobs/$2_jobs/$1.json"; } # ID STATE
in_state() { x test -f "$(jobf "$1" "$2")"; }
jfield() { # FILE NAME — the first "NAME": value (minbase has no jq)
    x sh -c "grep -o '\"$2\": *\\(\"[^\"]*\"\\|[^,}]*\\)' '$1' | head -1" |
        sed 's/^[^:]*: *//; s/^"//; s/"[[:space:]]*$//'
}

# The session bus of the user manager. Debian ships it in dbus-user-session; the test image
# (minbase) has dbus-daemon but not that package and no network to fetch it, so its two
# units are written here, as that package has them.
if ! x test -e /usr/lib/systemd/user/dbus.socket; then
    x mkdir -p /etc/systemd/user
    x sh -c 'cat >/etc/systemd/user/dbus.socket' <<'EOT'
[Unit]
Description=D-Bus User Message Bus Socket
[Socket]
ListenStream=%t/bus
ExecStartPost=-/usr/bin/systemctl --user set-environment DBUS_SESSION_BUS_ADDRESS=unix:path=%t/bus
[Install]
WantedBy=sockets.target
Also=dbus.service
EOT
    x sh -c 'cat >/etc/systemd/user/dbus.service' <<'EOT'
[Unit]
Description=D-Bus User Message Bus
Requires=dbus.socket
[Service]
ExecStart=/usr/bin/dbus-daemon --session --address=systemd: --nofork --nopidfile --systemd-activation --syslog-only
ExecReload=/usr/bin/dbus-send --print-reply --session --type=method_call --dest=org.freedesktop.DBus / org.freedesktop.DBus.ReloadConfig
[Install]
Also=dbus.socket
EOT
    x systemctl --global enable dbus.socket >/dev/null 2>&1
fi
# journalctl --user reads the user's own journal file: journald splits per user only on
# persistent storage (and gives the user an ACL on it, which the test's overlay file system
# may not keep: systemd-journal membership lets journalctl --user read the lines either way;
# it still shows only the user's own units).
x usermod -aG systemd-journal "$U"
x mkdir -p /var/log/journal
x systemd-tmpfiles --create --prefix /var/log/journal >/dev/null 2>&1 || true
x journalctl --flush >/dev/null 2>&1 || true
sys_copy_in "$m" "$REPO/tests/fixtures/fake-claude" /usr/local/bin/fake-claude

# The system configuration of the package is there and names the system store.
sys_expect_match "the package's /etc/agentstore/config.yaml names /var/lib/agentstore" \
    '/var/lib/agentstore' "$(x cat /etc/agentstore/config.yaml 2>&1)"

# The user manager needs XDG_RUNTIME_DIR, which pam_systemd (libpam-systemd) sets on a real
# install; the test image (minbase) lacks that package, so the unit gets it from a drop-in.
if ! x test -e /lib/security/pam_systemd.so && ! x test -e /usr/lib/x86_64-linux-gnu/security/pam_systemd.so; then
    x mkdir -p /etc/systemd/system/user@.service.d
    x sh -c 'printf "[Service]\nEnvironment=XDG_RUNTIME_DIR=/run/user/%%i\n" >/etc/systemd/system/user@.service.d/xdg.conf'
    x systemctl daemon-reload
fi
sys_check "loginctl enable-linger $U" x loginctl enable-linger "$U"
manager_up() { [ "$(x systemctl is-active "user@$uid.service")" = active ] && x test -S "$RUN/bus"; }
sys_check "lingering starts user@$uid.service with a session bus" sys_wait_until 60 "user manager" manager_up

# setup, non-interactive, as the user.
u mkdir -p "$H/src/demo"
out=$(u orchestrator setup --project demo --directory "$H/src/demo" --serve-queue poplar 2>&1) || true
sys_log "setup: $out"
sys_expect_match "setup made the store in ~/Dropbox/AgentStore" "$S" "$out"
sys_expect_eq "... owned by $U" "$U" "$(x stat -c %U "$S/config.yaml" 2>&1)"
sys_expect_eq "systemctl --user is-enabled agentstore.target" enabled "$(usys is-enabled agentstore.target 2>&1)"
sys_check "agentstore.target is active" sys_wait_until 30 "target" uactive agentstore.target
sys_check "queue-manager@poplar.path is active" sys_wait_until 30 "qm path" uactive queue-manager@poplar.path
sys_check "agentstore-orchestrator.path is active" sys_wait_until 30 "orch path" uactive agentstore-orchestrator.path
out2=$(u orchestrator setup --project demo --directory "$H/src/demo" --serve-queue poplar 2>&1) && rc=0 || rc=$?
sys_expect_eq "setup again exits 0" 0 "$rc"
sys_expect_match "... and keeps what exists" 'exists' "$out2"
sys_expect_eq "nothing was written to the system store" "" "$(x sh -c 'ls /var/lib/agentstore/Queues/*/Jobs/*_jobs/ 2>/dev/null | grep json' || true)"

# The queue runs the fake claude; the daemons exit after 4 s idle.
sys_check "set-queue poplar --claude-cli-path" u orchestrator set-queue poplar --claude-cli-path /usr/local/bin/fake-claude
# The user's own configuration lists it (issue 27: a queue only chooses among its programs).
u sh -c 'mkdir -p ~/.config/agentstore && printf "\nprograms:\n  claude: [/usr/local/bin/fake-claude]\n" >>~/.config/agentstore/config.yaml'

u sed -i 's/idle_exit_seconds: *[0-9]*/idle_exit_seconds: 4/' "$S/config.yaml"
sys_expect_match "idle_exit_seconds is 4" 'idle_exit_seconds: 4' "$(x cat "$S/config.yaml")"

# A job submitted with the CLI: over the session bus (D-Bus activation of orchestratord).
out=$(u orchestrator research-code --project demo --task 'SLEEP=6' 2>&1) || true
id=$(sed -n 's/^Job queued: \([0-9a-f-]*\)$/\1/p' <<<"$out" | head -1)
sys_expect_match "research-code prints Job queued: <uuid> ($out)" '^[0-9a-f]{8}-[0-9a-f-]{27}$' "$id"
busnames() { u busctl --user list --no-legend --acquired 2>/dev/null; }
sys_expect_match "busctl --user shows org.agentstore.Orchestrator1" 'org\.agentstore\.Orchestrator1' "$(busnames)"
sys_expect_eq "its StoreRoot is the user's store (not /etc's /var/lib/agentstore)" "s \"$S\"" \
    "$(u busctl --user get-property org.agentstore.Orchestrator1 /org/agentstore/Orchestrator1 org.agentstore.Orchestrator1 StoreRoot 2>&1)"
sys_check "the job runs" sys_wait_until 60 "running" in_state "$id" running
qm_named() { busnames | grep -q 'org\.agentstore\.Queue\.poplar'; }
sys_check "busctl --user shows org.agentstore.Queue.poplar" sys_wait_until 20 "queue name" qm_named
scope=agentstore-job-$id.scope
scope_listed() { usys list-units --type=scope --no-legend --plain 2>/dev/null | grep -q "$scope"; }
sys_check "the job is a transient scope of the user manager ($scope)" sys_wait_until 10 "scope" scope_listed
pid=$(jfield "$(jobf "$id" running)" process_id)
cg=$(x cat "/proc/$pid/cgroup" 2>&1 || true)
sys_expect_match "the worker's cgroup is under user@$uid.service ($cg)" "user@$uid\\.service/.*$scope" "$cg"
sys_expect_eq "the worker runs as $U" "$U" "$(x ps -o user= -p "$pid" 2>&1 | tr -d ' ')"
sys_check "the job finishes" sys_wait_until 60 "finished" in_state "$id" finished
f=$(jobf "$id" finished)
sys_expect_eq "the job file is the user's" "$U" "$(x stat -c %U "$f")"
sys_expect_match "runtime.unit names the scope" "$scope" "$(jfield "$f" unit)"
sys_check "its output holds the shipped command's text" x grep -q 'code research' "$f"
sys_check "the job is not in the system store" x test ! -e "/var/lib/agentstore/Queues/poplar/Jobs/finished_jobs/$id.json"
doc=$(jfield "$S/projects/demo/project.json" code_research_document)
sys_expect_match "the project has a research document path ($doc)" "^$H/src/demo/" "$doc"
sys_check "the job wrote the research document" sys_wait_until 10 "document" x test -s "$doc"
sys_expect_eq "... as $U" "$U" "$(x stat -c %U "$doc" 2>&1)"
handled() { x grep -q '"handled": *true' "$f"; }
# With idle_exit_seconds 4 orchestratord may have exited while the job ran; then its timer
# (OnUnitInactiveSec=5min) brings it back for the completions. Start it as the timer would,
# rather than wait 5 minutes.
if ! uactive agentstore-orchestrator.service; then
    sys_log "orchestratord idled out while the job ran; starting it as its timer would"
    usys start --no-block agentstore-orchestrator.service || true
fi
sys_check "the user's orchestratord handled the finished job" sys_wait_until 60 "handled" handled

# The journal of the user: both daemons and the job.
jq_lines() { u journalctl --user --no-pager -o cat "$@" 2>/dev/null; }
has_orch() { jq_lines -u agentstore-orchestrator.service | grep -q .; }
has_qm() { jq_lines -u queue-manager@poplar.service | grep -q .; }
has_job() { jq_lines "JOB_ID=$id" | grep -q .; }
sys_check "journalctl --user -u agentstore-orchestrator has lines" sys_wait_until 20 "orch journal" has_orch
sys_check "journalctl --user -u queue-manager@poplar has lines" sys_wait_until 20 "qm journal" has_qm
sys_check "journalctl --user JOB_ID=<id> has the job's lines" sys_wait_until 20 "job journal" has_job

# Zero resident processes when idle, then the .path units bring both back.
sys_check "queue-manager@poplar exits when idle" sys_wait_until 60 "qm idle exit" uinactive queue-manager@poplar.service
sys_check "orchestratord exits when idle" sys_wait_until 60 "orch idle exit" uinactive agentstore-orchestrator.service
no_daemons() { ! x pgrep -u "$U" -x 'orchestratord|queue-manager' >/dev/null; }
sys_check "no AgentStore process of $U is left" sys_wait_until 10 "no daemons" no_daemons
# An inbox file, as another machine writes it through Dropbox (the CLI with --bus none).
out=$(u orchestrator --bus none research-code --project demo 2>&1) || true
id2=$(sed -n 's/^Job queued: \([0-9a-f-]*\)$/\1/p' <<<"$out" | head -1)
sys_expect_match "the inbox path prints Job queued: <uuid> ($out)" '^[0-9a-f]{8}-' "$id2"
sys_check "agentstore-orchestrator.path starts orchestratord and the job is queued or further" \
    sys_wait_until 60 "job made" x sh -c "ls $S/Queues/poplar/Jobs/*_jobs/$id2.json"
sys_check "queue-manager@poplar.path starts the manager and the job finishes" \
    sys_wait_until 90 "finished" in_state "$id2" finished
# Issue 35 and 32, per-user mode: a key given with the documented command, `orchestrator
# set-job-key` (from standard input; a 0600 file of the user's named by a LoadCredential=
# drop-in), reaches the next job's agent as ANTHROPIC_API_KEY without the user restarting
# anything: the command restarts the running manager itself (systemd loads credentials only
# when a unit starts), and the job that manager was running goes on to finish. The key is in
# no unit file, no `systemctl --user show` or show-environment, no manager environment, no
# store document, no journal line and not in the command's output.
ukey="sk-user-credential-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"
# Test instrumentation only (not the product's way): the fake claude writes its environment
# to a file the test reads.
u sh -c 'mkdir -p ~/.config/systemd/user/queue-manager@.service.d && printf "[Service]\nEnvironment=AGENTSTORE_PASS_ENV=FAKE_CLAUDE_ENVFILE FAKE_CLAUDE_ENVFILE=%%h/src/demo/job-env.txt\n" >~/.config/systemd/user/queue-manager@.service.d/test-env.conf'
sys_check "systemctl --user daemon-reload" usys daemon-reload
sys_check "the manager is idle before the credential jobs" sys_wait_until 60 "qm idle exit" uinactive queue-manager@poplar.service
# A long job keeps a manager running (without the key) while the key is set.
out=$(u orchestrator research-code --project demo --task 'SLEEP=25' 2>&1) || true
idA=$(sed -n 's/^Job queued: \([0-9a-f-]*\)$/\1/p' <<<"$out" | head -1)
sys_expect_match "a long job is queued ($out)" '^[0-9a-f]{8}-' "$idA"
sys_check "the long job runs" sys_wait_until 90 "running" in_state "$idA" running
qm_pid0=$(usys show -p MainPID --value queue-manager@poplar.service)
sys_expect_match "a queue manager runs it (pid $qm_pid0)" '^[1-9][0-9]*$' "$qm_pid0"
setkey=$(printf '%s\n' "$ukey" | u orchestrator set-job-key ANTHROPIC_API_KEY 2>&1) && rc=0 || rc=$?
sys_log "set-job-key: $setkey"
sys_expect_eq "printf KEY | orchestrator set-job-key ANTHROPIC_API_KEY exits 0" 0 "$rc"
sys_expect_match "... and says it restarted the running manager" 'restarted +queue-manager@poplar\.service' "$setkey"
kf=$H/.config/agentstore/keys/job-env.ANTHROPIC_API_KEY
sys_expect_eq "the key file is the user's alone" "600 $U" "$(x stat -c '%a %U' "$kf" 2>&1)"
new_manager() {
    local p
    p=$(usys show -p MainPID --value queue-manager@poplar.service)
    [ -n "$p" ] && [ "$p" != 0 ] && [ "$p" != "$qm_pid0" ] && uactive queue-manager@poplar.service
}
sys_check "a new manager runs (the command restarted it, nobody by hand)" sys_wait_until 30 "new qm" new_manager
out=$(u orchestrator research-code --project demo --task 'SLEEP=8' 2>&1) || true
id3=$(sed -n 's/^Job queued: \([0-9a-f-]*\)$/\1/p' <<<"$out" | head -1)
sys_expect_match "the next job is queued ($out)" '^[0-9a-f]{8}-' "$id3"
sys_check "the next job runs" sys_wait_until 90 "running" in_state "$id3" running
qm_pid=$(usys show -p MainPID --value queue-manager@poplar.service)
cred_dir=$(x sh -c "tr '\\0' '\\n' </proc/$qm_pid/environ | sed -n 's/^CREDENTIALS_DIRECTORY=//p'")
sys_expect_match "the user's manager has a credentials directory" "^$RUN/" "$cred_dir"
qm_env=$(x sh -c "tr '\\0' '\\n' </proc/$qm_pid/environ" 2>&1 || true)
sys_check "the next job finishes" sys_wait_until 90 "finished" in_state "$id3" finished
got_key() { x grep -qxF "ANTHROPIC_API_KEY=$ukey" "$H/src/demo/job-env.txt"; }
sys_check "the next job's agent had the key from the credential" got_key
sys_expect_eq "... and ran as $U" "$U" "$(x sed -n 's/^USER=//p' "$H/src/demo/job-env.txt")"
sys_check "the long job, running across the restart, finishes too" sys_wait_until 90 "finished" in_state "$idA" finished
uabsent() { # WHAT then a command whose output must not hold the key
    local what=$1 out
    shift
    out=$("$@" 2>&1) || true
    if grep -qF "$ukey" <<<"$out"; then
        sys_fail "the user's key appears in $what"
    else
        sys_pass "the user's key is not in $what ($(wc -c <<<"$out") bytes looked at)"
    fi
}
uabsent "the unit files and drop-ins" x grep -rF -- "$ukey" "$H/.config/systemd" /etc/systemd /usr/lib/systemd
uabsent "systemctl --user show queue-manager@poplar.service" usys show queue-manager@poplar.service
uabsent "systemctl --user show-environment" usys show-environment
uabsent "the queue manager's process environment" printf '%s' "$qm_env"
uabsent "the user manager's process environment" x sh -c "cat /proc/\$(systemctl show -p MainPID --value user@$uid.service)/environ"
uabsent "the user's store" x grep -rF -- "$ukey" "$S"
uabsent "the journal (every field of every entry)" x journalctl -o export --no-pager
uabsent "the output of set-job-key" printf '%s' "$setkey"
# --remove takes it away again, for the next job, the same way.
out=$(u orchestrator set-job-key ANTHROPIC_API_KEY --remove 2>&1) && rc=0 || rc=$?
sys_expect_eq "set-job-key --remove exits 0 ($out)" 0 "$rc"
sys_check "... and removes the key file" x test ! -e "$kf"
sys_check "... and its drop-in (no key left)" x test ! -e "$H/.config/systemd/user/queue-manager@.service.d/agentstore-keys.conf"

# Issue 31, per-user mode: the user's notifier (the packaged agentstore-notify user unit)
# tells the desktop that a job failed: org.freedesktop.Notifications on the user's session
# bus, served here by a minimal server that logs what it is shown (a desktop's notification
# daemon needs a display).
fn_bin=$REPO/target/release/examples/fake_notifications
[ -x "$fn_bin" ] || sys_die "$fn_bin is missing: cargo build --release --example fake_notifications (run.sh builds it)"
sys_copy_in "$m" "$fn_bin" /usr/local/bin/fake_notifications
x chmod 755 /usr/local/bin/fake_notifications
nlog=$H/notifications.jsonl
sys_check "a notification server runs on $U's session bus (systemd-run --user)" \
    u systemd-run --user --unit fake-notifications --property=Type=exec /usr/local/bin/fake_notifications --log "$nlog"
served() { u busctl --user list --no-legend 2>/dev/null | grep -q '^org\.freedesktop\.Notifications '; }
sys_check "... and owns org.freedesktop.Notifications" sys_wait_until 30 "notification server" served
out=$(u orchestrator set-user --notify desktop --notify-events job_failed 2>&1) && rc=0 || rc=$?
sys_expect_eq "set-user --notify desktop --notify-events job_failed exits 0 ($out)" 0 "$rc"
sys_check "systemctl --user start agentstore-notify.service" usys start agentstore-notify.service
out=$(u orchestrator research-code --project demo --task 'EXIT=3' 2>&1) || true
idF=$(sed -n 's/^Job queued: \([0-9a-f-]*\)$/\1/p' <<<"$out" | head -1)
sys_expect_match "a job that will fail is queued ($out)" '^[0-9a-f]{8}-' "$idF"
sys_check "the job fails" sys_wait_until 90 "failed" in_state "$idF" failed
shown() { x grep -q "Job $idF failed" "$nlog" 2>/dev/null; }
sys_check "the desktop is told the job failed (agentstore-notify --user, session bus)" sys_wait_until 60 "desktop notification" shown
sys_expect_match "... by agentstore" '"app_name": *"agentstore"' "$(x grep "Job $idF failed" "$nlog" 2>&1)"
sys_expect_eq "... once" 1 "$(x grep -c "Job $idF failed" "$nlog" 2>&1)"
sys_test_end
