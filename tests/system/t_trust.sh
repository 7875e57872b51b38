#!/usr/bin/env bash
# t_trust (issue 27, the root holes): the packaged root queue-manager@ runs a job only as an
# account the machine allows and only a program the machine allows, whatever the store says
# (DESIGN §9, docs/trust-model.md):
#  - issue 27's report: users/evil.json `unix_user: root` and a queue whose claude_cli_path is
#    a script the store's writer planted → the job fails once naming root and the rule, the
#    script never runs; the same script for an allowed account → refused as a program;
#  - a system account (daemon) → refused; an account outside run_as.allowed_groups → refused,
#    a member runs, with its own groups only (nothing of the daemon's or the store's);
#  - /etc/agentstore/config.yaml trusted only while root owns it and nobody else can write it;
#  - the manager goes on serving after every refusal.
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

sys_copy_in "$m" "$REPO/tests/fixtures/fake-claude" /usr/local/bin/fake-claude
setup_users
x groupadd agents
x useradd --create-home --shell /bin/bash bob
setup_project TestProject /home/jobuser/proj
x sh -c 'mkdir -p /home/jobuser/proj/.claude/commands && echo "Greet \$ARGUMENTS" >/home/jobuser/proj/.claude/commands/greet.md && chown -R jobuser: /home/jobuser/proj'
setup_queue "$Q" 2 /usr/local/bin/fake-claude

# The store's writer (the agentstore account: what a sync peer or a bug in a service running
# as it can do) plants a script, a user mapped to root, a project of theirs and a queue
# running the script.
as_svc sh -c 'mkdir -p /var/lib/agentstore/evil && printf "#!/bin/sh\nid >/var/lib/agentstore/evil/pwned\ncat >/dev/null\n" >/var/lib/agentstore/evil/pwn.sh && chmod 755 /var/lib/agentstore/evil/pwn.sh'
evil_user() { # ID UNIX_USER
    put "$AS/users/$1.json" <<EOT
{"id": "$1", "name": "E", "email": "e@example.org", "permissions": "user", "unix_user": "$2"}
EOT
}
evil_project() { # ID OWNER
    put "$AS/projects/$1/project.json" <<EOT
{"id": "$1", "directory": "/tmp", "create_time": "$(now)", "update_time": "$(now)",
 "owner": "$2", "collaborators": [], "default_queue": "$Q"}
EOT
}
evil_user evil root
evil_project EvilProject evil
evil_user sys daemon
evil_project SysProject sys
evil_user bobdoc bob
evil_project BobProject bobdoc
setup_queue evilq 1 claude
queue_json evilq 1 /var/lib/agentstore/evil/pwn.sh '["-p"]' | put "$AS/Queues/evilq/queue.json"
sys_check "queue-manager@$Q starts" x systemctl start "queue-manager@$Q.service"
sys_check "queue-manager@evilq starts" x systemctl start queue-manager@evilq.service

# The whole failed job file (its error has escaped quotes, which jfield stops at).
error_of() { x cat "$(jobf "$1" failed "${2:-}")"; }
not_there() { ! x test -e "$1"; }
ended() { in_state "$1" failed "${2:-}" || in_state "$1" finished "${2:-}"; }
claude_job() { job_json "$1" claude greet hello 60 '{}' "${2:-/tmp}"; }

# --- issue 27 item 1: root chosen by the store, the store's own program ----------------------
queue_job r1 "$(claude_job EvilProject)" evilq
sys_check "unix_user root: the job ends" sys_wait_until 60 "r1 ends" ended r1 evilq
sys_check "... failed" in_state r1 failed evilq
e=$(error_of r1 evilq)
sys_expect_match "... naming root and the rule" 'Refused to run the job as Unix user root \(uid 0\): jobs never run as root' "$e"
sys_check "... the planted script never ran" not_there /var/lib/agentstore/evil/pwned
# An allowed account, the store's own program: refused as a program.
queue_job r2 "$(claude_job TestProject /home/jobuser/proj)" evilq
sys_check "a planted claude_cli_path: the job ends" sys_wait_until 60 "r2 ends" ended r2 evilq
e=$(error_of r2 evilq)
sys_expect_match "... refused as a program this machine does not allow" 'config.claude_cli_path \\"/var/lib/agentstore/evil/pwn.sh\\": is not a program this machine allows' "$e"
sys_check "... the planted script never ran" not_there /var/lib/agentstore/evil/pwned

# --- a system account; the manager goes on serving -------------------------------------------
queue_job s1 "$(job_json SysProject noop noop x 60 '{"sleep_seconds": 0}')"
sys_check "unix_user daemon: the job ends" sys_wait_until 60 "s1 ends" ended s1
e=$(error_of s1)
sys_expect_match "... refused as a system account" 'Unix user daemon \(uid 1\): uid 1 is outside .* a system account' "$e"
queue_job ok1 "$(job_json TestProject noop noop x 60 '{"sleep_seconds": 0}')"
sys_check "the manager goes on: an ordinary account's job finishes" sys_wait_until 60 "ok1 finished" in_state ok1 finished

# --- run_as.allowed_groups in /etc/agentstore/config.yaml -----------------------------------
x cp /etc/agentstore/config.yaml /etc/agentstore/config.yaml.orig
x sh -c 'printf "\nrun_as:\n  allowed_groups: [agents]\n  allowed_users: [daemon]\n" >>/etc/agentstore/config.yaml'
x usermod -aG agents jobuser
queue_job g1 "$(job_json BobProject noop noop x 60 '{"sleep_seconds": 0}')"
sys_check "bob, outside the allowed groups: the job ends" sys_wait_until 60 "g1 ends" ended g1
e=$(error_of g1)
sys_expect_match "... refused naming the groups and the file" 'Unix user bob .*none of the allowed groups \(agents\).*/etc/agentstore/config.yaml' "$e"
queue_job g2 "$(claude_job TestProject /home/jobuser/proj)"
sys_check "jobuser, in agents: the claude job finishes" sys_wait_until 60 "g2 finished" in_state g2 finished
out=$(x cat "$(jobf g2 finished)")
want=$(x id -G jobuser | tr ' ' '\n' | sort -n | tr '\n' ' ')
got=$(grep -o '\\"groups\\":\\"[0-9 ]*\\"' <<<"$out" | head -1 | sed 's/.*:\\"//; s/\\"$//' | tr ' ' '\n' | sort -n | tr '\n' ' ')
sys_expect_eq "... with jobuser's own groups only" "$want" "$got"
sys_expect_match "... as jobuser" "\\\\\"user\\\\\":\\\\\"jobuser\\\\\"" "$out"
# allowed_users: the file names daemon; trusted while root's and writable by nobody else.
queue_job d1 "$(job_json SysProject noop noop x 60 '{"sleep_seconds": 0}')"
sys_check "daemon, listed in allowed_users: its job finishes" sys_wait_until 60 "d1 finished" in_state d1 finished
x chmod 666 /etc/agentstore/config.yaml
queue_job d2 "$(job_json SysProject noop noop x 60 '{"sleep_seconds": 0}')"
sys_check "a world-writable config: daemon's job ends" sys_wait_until 60 "d2 ends" ended d2
e=$(error_of d2)
sys_expect_match "... refused: the file is not trusted" 'Unix user daemon .*/etc/agentstore/config.yaml is not trusted.*writable by everyone' "$e"
x chmod 644 /etc/agentstore/config.yaml
x chown bob /etc/agentstore/config.yaml
queue_job d3 "$(job_json SysProject noop noop x 60 '{"sleep_seconds": 0}')"
sys_check "a config owned by bob: daemon's job ends" sys_wait_until 60 "d3 ends" ended d3
sys_expect_match "... refused: the file is not trusted" 'is not trusted.*owned by uid' "$(error_of d3)"
x chown root /etc/agentstore/config.yaml
sys_check "the manager still serves" active "queue-manager@$Q.service"
x mv /etc/agentstore/config.yaml.orig /etc/agentstore/config.yaml
sys_test_end
