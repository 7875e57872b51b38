#!/usr/bin/env bash
# t_web: the HTTP API and dashboard under the real systemd (issue 16): the package's
# agentstore-web.socket listens on /run/agentstore/http.sock with the service stopped; the
# first request starts it; PRD §10 answers by the caller's Unix user (SO_PEERCRED); it exits
# when idle (the socket keeps listening, `systemctl status` says inactive, Result=success); the
# next request starts it again; the units verify and the service's exposure is at most 2.0.
# Prints the activation cost (connect on a stopped service → first byte).
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

# hget USER METHOD PATH — prints the status line's code, then the body; first byte on stderr.
cat >"$(sys_root "$m")/usr/local/bin/hget" <<'EOF'
#!/usr/bin/python3
import socket, sys, time
method, path = sys.argv[1], sys.argv[2]
t0 = time.monotonic()
s = socket.socket(socket.AF_UNIX)
s.settimeout(30)
s.connect("/run/agentstore/http.sock")
s.sendall(f"{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: 0\r\n\r\n".encode())
data, first = b"", None
while True:
    b = s.recv(65536)
    if not b:
        break
    if first is None:
        first = time.monotonic()
    data += b
head, _, body = data.partition(b"\r\n\r\n")
parts = head.split(b" ")
print(parts[1].decode() if len(parts) > 1 else "none")
print(f"first_byte_ms={((first or time.monotonic()) - t0) * 1000:.1f}", file=sys.stderr)
sys.stdout.write(body.decode(errors="replace"))
EOF
x chmod 755 /usr/local/bin/hget
err=$(mktemp)
sys_on_exit rm -f "$err"
hget() { # USER METHOD PATH
    if [ "$1" = root ]; then x hget "$2" "$3"; else x runuser -u "$1" -- hget "$2" "$3"; fi
}

# A short idle time for the test (the package's is 60 s).
x mkdir -p /etc/systemd/system/agentstore-web.service.d
x sh -c 'printf "[Service]\nExecStart=\nExecStart=/usr/bin/agentstore-web --bus system --root /var/lib/agentstore --idle-exit 3 --token-file /var/lib/agentstore-web/web-token\n" >/etc/systemd/system/agentstore-web.service.d/idle.conf'
x systemctl daemon-reload
x systemctl stop agentstore-web.service 2>/dev/null || true

sys_check "the socket is listening after install" active agentstore-web.socket
sys_check "the service is not running before the first request" inactive agentstore-web.service

out=$(hget alice GET /api/v1/whoami 2>"$err") || true
first=$(grep -o 'first_byte_ms=[0-9.]*' "$err" || true)
sys_expect_match "first request (alice) starts the service and is answered for alice" '^200.*alice' "$(tr '\n' ' ' <<<"$out")"
sys_log "activation: connect on a stopped service → first byte: ${first#first_byte_ms=} ms"
sys_check "the service is active after the first request" active agentstore-web.service
out=$(hget alice GET /api/v1/users 2>/dev/null) || true
sys_expect_match "alice (user role) may not list users: 403, as over D-Bus" '^403' "$out"
out=$(hget mallory GET /api/v1/projects 2>/dev/null) || true
sys_expect_match "mallory (no users/ document) is refused" '^40[13]' "$out"
out=$(hget jobuser GET /api/v1/projects 2>/dev/null) || true
sys_expect_match "chenry (admin, Unix user jobuser) lists the projects" '^200.*TestProject' "$(tr '\n' ' ' <<<"$out")"
out=$(hget alice GET / 2>/dev/null) || true
sys_expect_match "the dashboard is served" '^200.*<html' "$(tr '\n' ' ' <<<"$out")"
out=$(hget alice GET /api/openapi.json 2>/dev/null) || true
sys_expect_match "the OpenAPI document is served" '^200.*openapi' "$(tr '\n' ' ' <<<"$out")"

sys_check "idle: the service exits by itself" sys_wait_until 30 "agentstore-web idle exit" inactive agentstore-web.service
res=$(x systemctl show -p Result --value agentstore-web.service)
sys_expect_eq "the idle exit is a success, not a failure" success "$res"
sys_check "the socket is still listening after the idle exit" active agentstore-web.socket
st=$(x systemctl status agentstore-web.service 2>&1) || true
sys_expect_match "systemctl status tells the truth: inactive (dead), triggered by the socket" 'inactive \(dead\)' "$st"

out=$(hget alice GET /api/v1/whoami 2>"$err") || true
first=$(grep -o 'first_byte_ms=[0-9.]*' "$err" || true)
sys_expect_match "a request after the idle exit starts it again" '^200.*alice' "$(tr '\n' ' ' <<<"$out")"
sys_log "activation again: ${first#first_byte_ms=} ms"
out=$(hget alice GET /api/v1/whoami 2>"$err") || true
sys_log "warm request: $(grep -o 'first_byte_ms=[0-9.]*' "$err" || true) ms"
rss=$(x sh -c 'grep VmRSS /proc/$(systemctl show -p MainPID --value agentstore-web.service)/status' 2>/dev/null || true)
sys_log "agentstore-web $rss"

svc=$(x systemctl show -p FragmentPath --value agentstore-web.service)
sock=$(x systemctl show -p FragmentPath --value agentstore-web.socket)
out=$(x systemd-analyze verify --man=no "$sock" "$svc" 2>&1) && rc=0 || rc=$?
sys_expect_eq "systemd-analyze verify of the two units exits 0 (${out:0:300})" 0 "$rc"
sys_check "the package ships the man page agentstore-web(1)" x test -s /usr/share/man/man1/agentstore-web.1.gz
exp=$(x systemd-analyze security agentstore-web.service 2>&1 | sed -n 's/.*Overall exposure level for agentstore-web.service: \([0-9.]*\).*/\1/p')
sys_log "systemd-analyze security agentstore-web.service: $exp"
sys_check "exposure ${exp:-?} is at most 2.0" awk -v e="${exp:-99}" 'BEGIN { exit !(e <= 2.0) }'
sys_test_end
