# tests/system/researcher.sh — a researcher's machine for the first-day tests (t_firstday,
# t_secondday): a real login user with the pieces a desktop install has and minbase lacks
# (the session bus units, XDG_RUNTIME_DIR), the real Claude Code CLI and the fake model
# endpoint on the container's loopback, and small HTTP clients for the dashboard's socket.
# Sourced after lib.sh and store.sh (`m`, `x`, `root`); `researcher_setup USER` sets U, uid,
# H, S, RUN and host.
# shellcheck shell=bash disable=SC2034,SC2154 # set for the test that sources this

# researcher_setup USER
researcher_setup() {
    U=$1
    x useradd --create-home --shell /bin/bash "$U"
    uid=$(x id -u "$U")
    H=/home/$U
    S=$H/Dropbox/AgentStore
    RUN=/run/user/$uid
    host=$(x hostname)
    # What a real install has and the minbase image lacks: the session bus units
    # (dbus-user-session), XDG_RUNTIME_DIR from pam_systemd; journald per-user files.
    x mkdir -p /etc/systemd/user /etc/systemd/system/user@.service.d /var/log/journal
    printf '[Unit]\nDescription=D-Bus User Message Bus Socket\n[Socket]\nListenStream=%%t/bus\nExecStartPost=-/usr/bin/systemctl --user set-environment DBUS_SESSION_BUS_ADDRESS=unix:path=%%t/bus\n[Install]\nWantedBy=sockets.target\nAlso=dbus.service\n' \
        >"$root/etc/systemd/user/dbus.socket"
    printf '[Unit]\nDescription=D-Bus User Message Bus\nRequires=dbus.socket\n[Service]\nExecStart=/usr/bin/dbus-daemon --session --address=systemd: --nofork --nopidfile --systemd-activation --syslog-only\n' \
        >"$root/etc/systemd/user/dbus.service"
    x systemctl --global enable dbus.socket >/dev/null 2>&1
    printf '[Service]\nEnvironment=XDG_RUNTIME_DIR=/run/user/%%i\n' >"$root/etc/systemd/system/user@.service.d/xdg.conf"
    x usermod -aG systemd-journal "$U"
    x systemctl daemon-reload
    # Claude Code and the fake model endpoint (the machine's loopback).
    local c f
    c=$(claude_host_binary) || true
    if [ -z "$c" ] || [ ! -x "$c" ]; then sys_die "the real Claude Code CLI is not installed on the host (bash .ci/install-claude.sh)"; fi
    f=$(fake_anthropic_binary)
    [ -x "$f" ] || sys_die "$f is missing: cargo build --release --example fake_anthropic (run.sh builds it)"
    cp "$c" "$root/usr/local/bin/claude"
    cp "$f" "$root/usr/local/bin/fake_anthropic"
    # HTTP clients for a Unix socket (minbase has perl, not curl).
    cat >"$root/usr/local/bin/uget" <<'EOF'
#!/usr/bin/perl
# uget SOCKET PATH — GET over a Unix socket, prints the response
use IO::Socket::UNIX;
my ($sock, $path) = @ARGV;
my $s = IO::Socket::UNIX->new(Type => SOCK_STREAM(), Peer => $sock) or die "connect $sock: $!\n";
print $s "GET $path HTTP/1.0\r\nHost: localhost\r\n\r\n";
local $/; print <$s>;
EOF
    cat >"$root/usr/local/bin/upost" <<'EOF'
#!/usr/bin/perl
# upost SOCKET PATH FORM — POST a form (a=b&c=d) over a Unix socket as a browser's same-origin
# form would, prints the response
use IO::Socket::UNIX;
my ($sock, $path, $form) = @ARGV;
my $s = IO::Socket::UNIX->new(Type => SOCK_STREAM(), Peer => $sock) or die "connect $sock: $!\n";
print $s "POST $path HTTP/1.0\r\nHost: localhost\r\nSec-Fetch-Site: same-origin\r\n"
  . "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: " . length($form) . "\r\n\r\n$form";
local $/; print <$s>;
EOF
    x chmod 755 /usr/local/bin/uget /usr/local/bin/upost
}
# The user in a login-like environment, an 80-column terminal.
u() {
    x runuser -u "$U" -- env HOME="$H" USER="$U" LOGNAME="$U" XDG_RUNTIME_DIR="$RUN" \
        DBUS_SESSION_BUS_ADDRESS="unix:path=$RUN/bus" COLUMNS=80 "$@"
}
us() { u bash -c "$1"; }
ujob() { echo "$S/Queues/${3:-poplar}/Jobs/$2_jobs/$1.json"; } # ID STATE [QUEUE]
uin() { x test -f "$(ujob "$@")"; }
queued_id() { sed -n 's/^Job queued: \([0-9a-f-]*\).*/\1/p' <<<"$1" | head -1; }
# Every line of $2 fits 80 columns (characters, whatever the locale: not awk's bytes).
fits80() { perl -CS -ne 'chomp; $bad = 1 if length($_) > 80; END { exit($bad ? 1 : 0) }' <<<"$2"; }
check_fits() { sys_check "$1 fits 80 columns" fits80 "$1" "$2"; }
flat() { tr '\n' ' ' <<<"$1" | tr -s ' '; }
fake_model_n=0
fake_model() { # SCRIPT_JSON — (re)start the endpoint with these replies
    printf '%s' "$1" >"$root/var/tmp/script.json"
    x systemctl stop 'fake-anthropic*.service' >/dev/null 2>&1 || true
    # A new name each time: a stopped transient unit can stay loaded (seen when systemd
    # cannot remove its cgroup on this host's v1 hierarchy), and its name is then refused.
    fake_model_n=$((fake_model_n + 1))
    x systemd-run --unit "fake-anthropic-$fake_model_n" --property=Type=exec /usr/local/bin/fake_anthropic \
        --listen 127.0.0.1:18555 --script /var/tmp/script.json --log /var/tmp/anthropic.jsonl >/dev/null 2>&1
    sys_wait_until 20 "the fake Anthropic endpoint" x bash -c 'exec 3<>/dev/tcp/127.0.0.1/18555'
}
