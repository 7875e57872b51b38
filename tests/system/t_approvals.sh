#!/usr/bin/env bash
# t_approvals: a person's approval answered from the web API in the packaged SYSTEM mode
# (issue 27). The system queue manager runs as root and the web service as the `agentstore`
# service account, which Queue1.AnswerFor trusts as a front end acting for a named user (and
# no other account). An agent job of chenry (Unix user jobuser) asks before running a command
# (agentshell against a fake model endpoint speaking the Anthropic protocol); the request is
# listed through the web to its owner and to nobody else; alice's answer through the web is
# refused; mallory calling AnswerFor directly over the system bus (busctl, naming chenry) is
# refused; chenry's answer through the web reaches the job, which runs the command and records
# who allowed it. Then the same through Slack: the packaged agentstore-notify (as the service
# account, tokens from systemd credentials) posts the approval of a second job to its owner's
# direct messages only, on a fake Slack (examples/fake_slack.rs) inside the container; a click
# of alice's (mapped to a user PRD §10 refuses) and of an unlinked member are refused, and
# chenry's click answers the root manager's request through Queue1.AnswerFor.
# shellcheck source-path=SCRIPTDIR
# shellcheck disable=SC2016
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# python3 (in the second image) speaks HTTP over the Unix socket; minbase has no curl.
sys_use_wide_rootfs
sys_test_begin
[ -n "${SYS_DEB:-}" ] || sys_test_skip "needs the package"
m=$SYS_MACHINE
# shellcheck source=store.sh
. "$SYS_LIB_DIR/store.sh"
setup_users
setup_project TestProject /tmp/testproject

# The fake model: the agent asks to run a command, then says it is done.
root=$(sys_root "$m")
f=$(fake_anthropic_binary)
[ -x "$f" ] || sys_die "$f is missing: cargo build --release --example fake_anthropic (run.sh builds it)"
cp "$f" "$root/usr/local/bin/fake_anthropic"
cat >"$root/var/tmp/script.json" <<'EOF'
{"replies": [
  {"tool_use": {"name": "run_command", "input": {"command": "touch /tmp/testproject/allowed.txt"}}},
  {"text": "Done."}
 ], "fallback_text": "Done."}
EOF
x systemd-run --unit fake-anthropic --property=Type=exec /usr/local/bin/fake_anthropic \
    --listen 127.0.0.1:18555 --script /var/tmp/script.json --log /var/tmp/anthropic.jsonl >/dev/null 2>&1
sys_check "the fake model endpoint listens" sys_wait_until 20 "fake endpoint" x bash -c 'exec 3<>/dev/tcp/127.0.0.1/18555'
x mkdir -p /etc/systemd/system/queue-manager@.service.d
printf '[Service]\nEnvironment=AGENTSHELL_BASE_URL=http://127.0.0.1:18555 AGENTSHELL_API_KEY=fake\n' \
    >"$root/etc/systemd/system/queue-manager@.service.d/agentshell.conf"
x systemctl daemon-reload
setup_queue "$Q" 1
as_svc sh -c "sed -i 's/\"launcher\": \"systemd\",/\"launcher\": \"systemd\", \"approvals\": {\"deadline_seconds\": 300},/' $AS/Queues/$Q/queue.json"
sys_check "queue-manager@$Q starts" x systemctl start "queue-manager@$Q.service"

install_hreq
svc_user=$(x systemctl show -p User --value agentstore-web.service)
sys_expect_eq "agentstore-web runs as the service account" agentstore "$svc_user"

job='{"config": {"project": "TestProject", "working_directory": "/tmp/testproject", "queue_time": "'$(now)'",
  "jobtype": "agent", "claude_command": "code-researcher", "claude_extra_args": [], "user": "chenry",
  "model": "anthropic/claude-test", "task_description": "Make the file.", "supporting_data": {},
  "timeout_seconds": 600},
 "runtime": {"status": "queued", "start_time": null, "finish_time": null, "process_id": null,
  "llm_process_id": null, "error": null, "output": null}}'
queue_job ask1 "$job"

# The request, as the web lists it to the job's owner.
pending() { hreq jobuser GET /api/v1/approvals | grep -q '"request_id"'; }
sys_check "the job's request is listed through the web to its owner" sys_wait_until 120 "request listed" pending
list=$(hreq jobuser GET /api/v1/approvals)
req=$(grep -o '"request_id": *"[^"]*"' <<<"$list" | head -1 | sed 's/.*: *"//; s/"$//')
sys_expect_match "request id ($req) is the job's, unguessable" '^ask1-a1-[A-Za-z0-9]{16,}$' "$req"
sys_expect_match "with the command it would run" 'touch /tmp/testproject/allowed.txt' "$list"
out=$(hreq alice GET /api/v1/approvals)
sys_expect_match "alice (not the job's) is shown nothing" '^200' "$out"
if grep -q "$req" <<<"$out"; then sys_fail "alice sees the request: $out"; else sys_pass "alice does not see the request"; fi

# alice answers through the web: refused, the request still waits.
out=$(hreq alice POST "/api/v1/approvals/$Q/$req/answer" '{"allow": true}')
sys_expect_match "alice's answer through the web is refused" '^40[34]' "$(tr '\n' ' ' <<<"$out")"
# mallory (no user document) calls AnswerFor herself, naming chenry: only the service account
# is a trusted front end.
QN=("org.agentstore.Queue.$Q" "/org/agentstore/Queue/$Q" org.agentstore.Queue1)
out=$(x runuser -u mallory -- busctl --system call "${QN[@]}" AnswerFor sbbss "$req" true false "" chenry 2>&1) && rc=0 || rc=$?
sys_expect_eq "mallory's direct AnswerFor is refused" 1 "$rc"
sys_expect_match "as access denied (${out:0:160})" 'ccess|enied|not allowed|Permission' "$out"
# alice too, over the bus, naming chenry.
out=$(x runuser -u alice -- busctl --system call "${QN[@]}" AnswerFor sbbss "$req" true false "" chenry 2>&1) && rc=0 || rc=$?
sys_expect_eq "alice's direct AnswerFor naming chenry is refused" 1 "$rc"
sys_check "the file was not made by any refused answer" x test ! -e /tmp/testproject/allowed.txt
sys_check "the request still waits" pending

# chenry (Unix user jobuser) allows it through the web: the job runs the command and ends.
out=$(hreq jobuser POST "/api/v1/approvals/$Q/$req/answer" '{"allow": true, "message": "go ahead"}')
sys_expect_match "the owner's answer through the web is taken" '^200' "$out"
sys_check "the job finishes" sys_wait_until 120 "ask1 finished" in_state ask1 finished
sys_check "the allowed command ran" x test -e /tmp/testproject/allowed.txt
sys_expect_eq "as the job's account" jobuser "$(x stat -c %U /tmp/testproject/allowed.txt 2>&1)"
f=$(jobf ask1 finished)
rec=$(x cat "$f" | tr -d '\n' | grep -o '"approvals": *\[[^]]*\]' || true)
sys_expect_match "the job records chenry's allow of its request" "\"request_id\": *\"$req\".*\"allow\": *true.*\"by\": *\"chenry\"" "$rec"

# --- the same through Slack (issue 27: the Slack part) -----------------------------------------
fs=$(fake_slack_binary)
[ -x "$fs" ] || sys_die "$fs is missing: cargo build --release --example fake_slack (run.sh builds it)"
cp "$fs" "$root/usr/local/bin/fake_slack"
x systemd-run --unit fake-slack --property=Type=exec /usr/local/bin/fake_slack --dir /var/tmp/slack \
    --bot-token xoxb-fake-bot --app-token xapp-fake-app >/dev/null 2>&1
sys_check "the fake Slack listens" sys_wait_until 20 "fake Slack" x test -s /var/tmp/slack/base
base=$(x cat /var/tmp/slack/base)
x sh -c 'umask 077; printf xoxb-fake-bot >/etc/agentstore/slack-bot-token; printf xapp-fake-app >/etc/agentstore/slack-app-token'
x mkdir -p /etc/systemd/system/agentstore-notify.service.d
printf '[Service]\nLoadCredential=slack-bot-token:/etc/agentstore/slack-bot-token\nLoadCredential=slack-app-token:/etc/agentstore/slack-app-token\n' \
    >"$root/etc/systemd/system/agentstore-notify.service.d/slack.conf"
printf '\nnotify:\n  poll_interval_ms: 200\n  slack:\n    api_url: %s/api\n    bot_token_credential: slack-bot-token\n    app_token_credential: slack-app-token\n' \
    "$base" >>"$root/etc/agentstore/config.yaml"
x systemctl daemon-reload
sys_check "chenry's notices go to Slack (U0CHENRY)" adm set-user chenry --notify slack --slack-username U0CHENRY
sys_check "alice's too (U0ALICE)" adm set-user alice --notify slack --slack-username U0ALICE
sys_check "agentstore-notify starts" x systemctl restart agentstore-notify.service
sys_expect_eq "as the service account" agentstore "$(x systemctl show -p User --value agentstore-notify.service)"
# slack PYTHON-EXPR — evaluated with s = the fake's state.json (messages, acks, ephemeral).
slack() { x python3 -c 'import json, sys; s = json.load(open("/var/tmp/slack/state.json")); print(eval(sys.argv[1]))' "$1" 2>/dev/null; }
connected() { [ "$(slack 's["connected"]')" = True ]; }
sys_check "it holds the Socket Mode connection" sys_wait_until 60 "Socket Mode" connected

x systemctl stop fake-anthropic.service || true
cat >"$root/var/tmp/script-slack.json" <<'JSON'
{"replies": [
  {"tool_use": {"name": "run_command", "input": {"command": "touch /tmp/testproject/slack-allowed.txt"}}},
  {"text": "Done."}
 ], "fallback_text": "Done."}
JSON
x systemd-run --unit fake-anthropic-slack --property=Type=exec /usr/local/bin/fake_anthropic \
    --listen 127.0.0.1:18555 --script /var/tmp/script-slack.json --log /var/tmp/anthropic-slack.jsonl >/dev/null 2>&1
sys_check "the fake model endpoint listens again" sys_wait_until 20 "fake endpoint" x bash -c 'exec 3<>/dev/tcp/127.0.0.1/18555'
queue_job ask2 "${job//Make the file./Make the Slack file.}"
posted() { [ "$(slack 'sum(1 for m in s["messages"] if "ask2-a1-" in json.dumps(m["metadata"]))')" -ge 1 ]; }
sys_check "the approval is posted to Slack" sys_wait_until 120 "approval posted" posted
chan=$(slack '[m["channel"] for m in s["messages"] if "ask2-a1-" in json.dumps(m["metadata"])]')
sys_expect_eq "to chenry's direct messages only (the job's owner)" "['D0CHENRY']" "$chan"
ts=$(slack '[m["ts"] for m in s["messages"] if m["channel"] == "D0CHENRY" and "ask2-a1-" in json.dumps(m["metadata"])][0]')
value=$(slack '[m["blocks"][1]["elements"][0]["value"] for m in s["messages"] if m["ts"] == "'"$ts"'"][0]')
sys_expect_match "its Allow button names the queue and request ($value)" "^$Q/ask2-a1-[A-Za-z0-9]{16,}\$" "$value"
sys_expect_match "with the command it would run" 'touch /tmp/testproject/slack-allowed.txt' "$(slack '[m["text"] for m in s["messages"] if m["ts"] == "'"$ts"'"][0]')"
# click ENVELOPE MEMBER — MEMBER presses Allow on chenry's message, as Slack sends it.
click() {
    printf '{"envelope_id": "%s", "type": "interactive", "accepts_response_payload": false, "payload": {"type": "block_actions", "user": {"id": "%s", "team_id": "T0FAKE"}, "api_app_id": "A0FAKE", "team": {"id": "T0FAKE"}, "container": {"type": "message", "message_ts": "%s", "channel_id": "D0CHENRY", "is_ephemeral": false}, "channel": {"id": "D0CHENRY"}, "message": {"type": "message", "ts": "%s"}, "trigger_id": "1.2.3", "actions": [{"type": "button", "action_id": "agentstore_allow", "block_id": "agentstore_approval", "value": "%s", "action_ts": "1700000001.000001"}]}}' \
        "$1" "$2" "$ts" "$ts" "$value" | x sh -c 'cat >/var/tmp/slack/send/.$1 && mv /var/tmp/slack/send/.$1 /var/tmp/slack/send/$1.json' sh "$1"
}
ephemerals() { slack 'len(s["ephemeral"])'; }
more() { [ "$(ephemerals)" -gt "$n" ]; } # another ephemeral reply than the n seen before
n=$(ephemerals)
click e-alice U0ALICE
sys_check "alice's click is refused (PRD §10: not her job)" sys_wait_until 60 "alice refused" more
sys_expect_match "saying so to her only" "U0ALICE.*Refused for alice" "$(slack 's["ephemeral"][-1]["user"] + " " + s["ephemeral"][-1]["text"]')"
n=$(ephemerals)
click e-mallory U0MALLORY
sys_check "an unlinked member's click is refused" sys_wait_until 60 "unlinked refused" more
sys_expect_match "as not linked" 'not linked' "$(slack 's["ephemeral"][-1]["text"]')"
sys_check "no refused click made the file" x test ! -e /tmp/testproject/slack-allowed.txt
click e-chenry U0CHENRY
sys_check "chenry's click answers: the job finishes" sys_wait_until 120 "ask2 finished" in_state ask2 finished
sys_check "the allowed command ran" x test -e /tmp/testproject/slack-allowed.txt
rec=$(x cat "$(jobf ask2 finished)" | tr -d '\n' | grep -o '"approvals": *\[[^]]*\]' || true)
sys_expect_match "the job records chenry's allow from Slack" '"allow": *true.*"by": *"chenry"' "$rec"
sys_expect_match "the Slack message says who answered" 'Allowed by chenry' "$(slack '[m["updates"] for m in s["messages"] if m["ts"] == "'"$ts"'"][0]')"
sys_expect_eq "every envelope was acknowledged" 3 "$(slack 'len({a["envelope_id"] for a in s["acks"]} & {"e-alice", "e-mallory", "e-chenry"})')"
sys_test_end
