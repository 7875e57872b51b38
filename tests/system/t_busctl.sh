#!/usr/bin/env bash
# t_busctl: both services on the system bus with busctl, as root and as unprivileged users:
# introspect, call, get-property; the policy (only the service user may own the names) and
# PRD §10 authorization (a Unix user with no users/ document is refused; a `user` cannot list
# users; only admins pause a queue).
# shellcheck source-path=SCRIPTDIR
# shellcheck disable=SC2016
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
sys_test_begin
[ -n "${SYS_DEB:-}" ] || sys_test_skip "needs the package"
m=$SYS_MACHINE
# shellcheck source=store.sh
. "$SYS_LIB_DIR/store.sh"
setup_users
setup_project TestProject /tmp/testproject
setup_queue poplar 2
x systemctl start queue-manager@poplar.service
O=(org.agentstore.Orchestrator1 /org/agentstore/Orchestrator1 org.agentstore.Orchestrator1)
QN=(org.agentstore.Queue.poplar /org/agentstore/Queue/poplar org.agentstore.Queue1)
as() { local u=$1; shift; if [ "$u" = root ]; then x "$@"; else x runuser -u "$u" -- "$@"; fi; }
submit() { # USER JSON
    as "$1" busctl --system call "${O[@]}" Submit s "$2"
}

for u in root alice; do
    out=$(as $u busctl --system introspect "${O[0]}" "${O[1]}" 2>&1) || true
    sys_expect_match "$u: busctl introspect Orchestrator1 lists Submit" '\.Submit +method' "$out"
    out=$(as $u busctl --system introspect "${QN[0]}" "${QN[1]}" 2>&1) || true
    sys_expect_match "$u: busctl introspect Queue.poplar lists CancelJob" '\.CancelJob +method' "$out"
    out=$(as $u busctl --system get-property "${O[@]}" Version 2>&1) || true
    sys_expect_match "$u: get-property Orchestrator1 Version" '^s "[0-9]+\.[0-9]+' "$out"
    out=$(as $u busctl --system get-property "${QN[@]}" WorkerCount 2>&1) || true
    sys_expect_eq "$u: get-property Queue.poplar WorkerCount" "u 2" "$out"
    out=$(as $u busctl --system get-property "${QN[@]}" ActiveJobs QueuedJobs Paused 2>&1) || true
    sys_expect_match "$u: get-property ActiveJobs QueuedJobs Paused" 'u 0.*u 0.*b false' "$(tr '\n' ' ' <<<"$out")"
done
out=$(submit root '{"command": "list-projects"}' 2>&1) || true
sys_expect_match "root: busctl call Submit list-projects" 'TestProject' "$out"
out=$(submit alice '{"command": "list-projects"}' 2>&1) || true
sys_expect_match "alice (user): busctl call Submit list-projects is answered" '^s ".*status' "$out"
out=$(submit jobuser '{"command": "list-users"}' 2>&1) || true
sys_expect_match "jobuser (chenry, admin): list-users" 'alice' "$out"
# PRD §10.
out=$(submit alice '{"command": "list-users"}' 2>&1) && rc=0 || rc=$?
sys_expect_match "alice (user role) cannot list users" 'PermissionDenied|ermission' "$out"
out=$(submit mallory '{"command": "list-projects"}' 2>&1) && rc=0 || rc=$?
sys_expect_match "mallory (no users/ document) is refused: org.agentstore.Error.PermissionDenied" 'PermissionDenied|no document in users' "$out"
sys_log "mallory: $out"
# The D-Bus error names (dbus-send prints them; busctl shows only the text).
ds() { # USER JSON
    as "$1" dbus-send --system --print-reply --dest="${O[0]}" "${O[1]}" "${O[2]}.Submit" "string:$2"
}
out=$(ds mallory '{"command": "list-projects"}' 2>&1) || true
sys_expect_match "mallory's refusal is org.agentstore.Error.PermissionDenied" 'org\.agentstore\.Error\.PermissionDenied' "$out"
out=$(ds alice '{"command": "list-users"}' 2>&1) || true
sys_expect_match "alice's list-users refusal is a named D-Bus error" 'org\.agentstore\.Error\.PermissionDenied|"status": *"error"' "$out"
sys_log "alice list-users: $(head -c 300 <<<"$out")"
out=$(submit alice '{"command": "list-projects", "user": "chenry"}' 2>&1) && rc=0 || rc=$?
sys_expect_match "alice cannot claim to be chenry" 'PermissionDenied|not chenry' "$out"
out=$(submit root '{"command": "no-such-command"}' 2>&1) && rc=0 || rc=$?
sys_expect_match "an unknown command: a named D-Bus error or an error answer" 'InvalidMessage|NotFound|Unknown command|"error"' "$out"
out=$(as alice busctl --system call "${QN[@]}" Pause 2>&1) && rc=0 || rc=$?
sys_expect_match "alice (user) cannot pause the queue" 'PermissionDenied|only admins' "$out"
out=$(as mallory busctl --system call "${QN[@]}" CancelJob s nothing 2>&1) && rc=0 || rc=$?
sys_expect_match "mallory cannot cancel jobs" 'PermissionDenied|no document|not an AgentStore user' "$out"
sys_check "jobuser (admin) pauses the queue" as jobuser busctl --system call "${QN[@]}" Pause
sys_expect_eq "Paused is true" "b true" "$(x busctl --system get-property "${QN[@]}" Paused 2>&1)"
sys_check "root resumes it" x busctl --system call "${QN[@]}" Resume
# The CLI for users outside the agentstore group (the store is 0750): over D-Bus.
out=$(as alice orchestrator list-projects 2>&1) && rc=0 || rc=$?
sys_expect_eq "orchestrator list-projects as alice (over D-Bus) exits 0: $(head -1 <<<"$out")" 0 "$rc"
out=$(as alice orchestrator list-users 2>&1) && rc=0 || rc=$?
sys_expect_match "orchestrator list-users as alice is refused (exit $rc)" 'ermission|PermissionDenied|admin' "$out"
out=$(as mallory orchestrator list-projects 2>&1) && rc=0 || rc=$?
sys_expect_match "orchestrator list-projects as mallory is refused (exit $rc)" 'ermission|not an AgentStore user|no document' "$out"

# The policy: only agentstore (orchestrator) / root (queue managers) may own the names.
x cp -a "$AS" /tmp/alice-store
x sh -c "cp -a /tmp/alice-store/Queues/poplar /tmp/alice-store/Queues/oakx && sed -i 's/\"id\": \"poplar\"/\"id\": \"oakx\"/' /tmp/alice-store/Queues/oakx/queue.json && sed -i 's/\"launcher\": \"systemd\"/\"launcher\": \"direct\"/' /tmp/alice-store/Queues/oakx/queue.json"
x chown -R alice: /tmp/alice-store
out=$(as alice timeout 20 orchestratord --bus system --root /tmp/alice-store 2>&1) && rc=0 || rc=$?
sys_expect_match "alice cannot own org.agentstore.Orchestrator1 (exit $rc)" 'AccessDenied|not allowed to own|already running|ermission' "$out"
sys_log "alice orchestratord: $(tail -n 2 <<<"$out" | tr '\n' ' ')"
out=$(as alice timeout 20 queue-manager --queue oakx --bus system --root /tmp/alice-store 2>&1) && rc=0 || rc=$?
sys_expect_match "alice cannot own org.agentstore.Queue.* (exit $rc)" 'AccessDenied|not allowed to own|ermission' "$out"
sys_log "alice queue-manager: $(tail -n 2 <<<"$out" | tr '\n' ' ')"
sys_test_end
