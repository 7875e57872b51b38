#!/usr/bin/env bash
# t_credentials (issue 35): a system-wide queue's API key reaches its jobs through a systemd
# credential and nowhere else. The key is encrypted with `systemd-creds encrypt` into
# /etc/credstore.encrypted/ and named in a drop-in of queue-manager@.service
# (LoadCredentialEncrypted=job-env.ANTHROPIC_API_KEY:…); the plain file is removed. A real
# Claude Code job (as jobuser, in its scope) calls the fake Anthropic endpoint, which sees
# the key in its x-api-key header: the job got it. Then the key is looked for everywhere it
# must not be: unit files and drop-ins, `systemctl show` of the manager (its Environment=
# and every other property), the manager's process environment, the whole
# store, every field of every journal entry.
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
key="sk-ant-credential-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"
install_claude_env '{"replies": [{"text": "# Research\n\nDone with the key."}],
 "fallback_text": "Fallback."}'
root=$(sys_root "$m")
# The endpoint settings without any key (install_claude_env's drop-in has a fake one).
printf '[Service]\nEnvironment=ANTHROPIC_BASE_URL=http://127.0.0.1:18555 CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_AUTOUPDATER=1\n' \
    >"$root/etc/systemd/system/queue-manager@.service.d/claude.conf"
# The administrator's steps: encrypt the key, name the credential in a drop-in.
x mkdir -p /etc/credstore.encrypted
printf '%s' "$key" | x sh -c 'umask 077; cat >/run/plain-key'
sys_check "systemd-creds encrypts the key" x systemd-creds encrypt --name=job-env.ANTHROPIC_API_KEY \
    /run/plain-key /etc/credstore.encrypted/job-env.ANTHROPIC_API_KEY
x rm -f /run/plain-key
printf '[Service]\nLoadCredentialEncrypted=job-env.ANTHROPIC_API_KEY:/etc/credstore.encrypted/job-env.ANTHROPIC_API_KEY\n' \
    >"$root/etc/systemd/system/queue-manager@.service.d/credentials.conf"
x systemctl daemon-reload
setup_users
setup_project CredProject /srv/CredProject poplar
setup_queue poplar 1 /usr/local/bin/claude '["-p", "--dangerously-skip-permissions"]'
command_file jobuser code-researcher 'Research the code of this project: $ARGUMENTS'
sys_check "queue-manager@poplar starts with the credential" x systemctl start queue-manager@poplar.service
queue_job cred-1 "$(job_json CredProject claude code-researcher 'use the key' 170 '{}' /srv/CredProject)"
ended() { in_state cred-1 finished || in_state cred-1 failed; }
sys_check "the job ends" sys_wait_until 200 "cred-1 ended" ended
f=$(x sh -c "ls $AS/Queues/$Q/Jobs/*_jobs/cred-1.json" | head -1)
sys_expect_match "the job finished" 'finished_jobs' "$f"
sys_log "job: $(x cat "$f" | tr '\n' ' ' | cut -c1-400)"
# The job got the key: its Claude Code sent it to the model endpoint.
sent() { x grep -qF "\"x-api-key\",\"$key\"" /var/tmp/anthropic.jsonl; }
sys_check "the job's agent sent the key to the endpoint (x-api-key)" sent

# Nowhere else.
absent() { # WHAT then a command whose output must not hold the key
    local what=$1 out
    shift
    out=$("$@" 2>&1) || true
    if grep -qF "$key" <<<"$out"; then
        sys_fail "the key appears in $what"
    else
        sys_pass "the key is not in $what ($(wc -c <<<"$out") bytes looked at)"
    fi
}
absent "unit files and drop-ins" x grep -rF -- "$key" /etc/systemd /usr/lib/systemd /lib/systemd /etc/credstore.encrypted
absent "systemctl show queue-manager@poplar.service" x systemctl show queue-manager@poplar.service
absent "systemctl show (the manager)" x systemctl show
absent "the manager's process environment" x sh -c 'cat /proc/$(systemctl show -p MainPID --value queue-manager@poplar.service)/environ'
absent "the store (/var/lib/agentstore)" x grep -rF -- "$key" /var/lib/agentstore
absent "the journal (every field of every entry)" x journalctl -o export --no-pager
absent "/etc (configuration)" x grep -rF -- "$key" /etc
sys_expect_match "the job's unit was a scope of its own" 'agentstore-job-cred-1' "$(jfield "$f" unit)"
# A credential the worker may not hand to a job fails the job, naming it (and not the value).
printf '[Service]\nSetCredential=job-env.LD_PRELOAD:/tmp/evil.so\n' \
    >"$root/etc/systemd/system/queue-manager@.service.d/bad.conf"
x systemctl daemon-reload
x systemctl restart queue-manager@poplar.service
queue_job cred-bad "$(job_json CredProject claude code-researcher 'x' 60 '{}' /srv/CredProject)"
sys_check "a job with a forbidden credential name fails" sys_wait_until 60 "cred-bad failed" in_state cred-bad failed
sys_expect_match "... its error names the credential" 'job-env.LD_PRELOAD' "$(jfield "$(jobf cred-bad failed)" error)"
sys_test_end
