#!/usr/bin/env bash
# Benchmark (issue 27): one local account holds CONNS slow connections to agentstore-web's
# Unix socket for SECS seconds while another account calls the API; the other caller's
# latency, p50/p99/max over the whole attack, must keep p99 under 1 s.
#   bash benches/web_slowloris.sh                 (builds the release binaries first)
#   NO_BUILD=1 bash benches/web_slowloris.sh      (target/release as it is)
#   BIN=target/debug NO_BUILD=1 …                 (other binaries; BIN=/path/of/main/target/…
#                                                  shows the server before the fix)
#   CONNS=1100 SECS=30 WEB_ARGS="--max-connections-per-caller 64" …
#   TRANSPORT=tcp …     the attack and the caller on the loopback TCP listener instead: the
#                       attacker without the token, the caller with it (issue 27 round 2:
#                       every TCP peer was one caller, so any local account starved the
#                       token holder)
# Needs root (the attacker runs as `nobody` through setpriv), python3, dbus-daemon, busctl.
#
# Real parts: `orchestrator init` makes the store, a private dbus-daemon, orchestratord and
# agentstore-web with the Unix listener passed as systemd passes it (LISTEN_FDS). The
# attacker (uid 65534) keeps CONNS connections open, a quarter each: half a request line;
# headers dribbled a byte a second; a whole request then silence on the kept-alive
# connection; a POST whose body comes a byte a second. A connection the server closes or
# refuses is opened again after 0.5 s (its Retry-After), so the pressure lasts the whole run.
# The caller (root) makes one request at a time, each on a new connection
# (GET /api/v1/whoami, then GET /api/v1/queues), 10 s timeout each (a timeout counts as 10 s).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${NO_BUILD:-}" ]; then
    cargo build --release --bin agentstore-web --bin orchestratord --bin orchestrator -q
fi
bin=${BIN:-$PWD/target/release}
conns=${CONNS:-1100}
secs=${SECS:-30}
work=$(mktemp -d)
chmod 755 "$work"
trap 'rm -rf "$work"' EXIT
if [ "$(id -u)" != 0 ]; then
    echo "web_slowloris: needs root (the attacker runs as nobody)" >&2
    exit 1
fi

python3 - "$bin" "$work" "$conns" "$secs" "${WEB_ARGS:-}" "${TRANSPORT:-unix}" <<'PY'
import json, os, shlex, socket, statistics, subprocess, sys, time

bin_dir, work, conns, secs, web_args = sys.argv[1], sys.argv[2], int(sys.argv[3]), \
    float(sys.argv[4]), shlex.split(sys.argv[5])
transport = sys.argv[6]
if transport not in ("unix", "tcp"):
    raise SystemExit(f"TRANSPORT={transport}: unix or tcp")
procs = []

def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]

ATTACKER = r'''
import asyncio, json, sys, time
path, conns, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
stats = {"opened": 0, "refused": 0, "closed_by_server": 0, "connect_failed": 0}
open_now = [0]
peak = [0]

async def one(i):
    kind = i % 4
    end = time.monotonic() + secs
    while time.monotonic() < end:
        try:
            if path.startswith("tcp:"):
                conn = asyncio.open_connection("127.0.0.1", int(path[4:]))
            else:
                conn = asyncio.open_unix_connection(path)
            r, w = await asyncio.wait_for(conn, 5)
        except Exception:
            stats["connect_failed"] += 1
            await asyncio.sleep(0.5)
            continue
        stats["opened"] += 1
        open_now[0] += 1
        peak[0] = max(peak[0], open_now[0])
        try:
            if kind == 0:
                w.write(b"GET /api/v1/who")
            elif kind == 2:
                w.write(b"GET /api/v1/whoami HTTP/1.1\r\nHost: x\r\n\r\n")
            elif kind == 3:
                w.write(b"POST /api/v1/messages HTTP/1.1\r\nHost: x\r\n"
                        b"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")
            await w.drain()
            n = 0
            while time.monotonic() < end:
                try:
                    got = await asyncio.wait_for(r.read(4096), 1.0)
                except asyncio.TimeoutError:
                    got = None
                if got == b"":
                    stats["closed_by_server"] += 1
                    break
                if got and got.startswith(b"HTTP/1.1 503"):
                    stats["refused"] += 1
                    break
                if kind == 1:
                    w.write(b"GET /api/v1/whoami HTTP/1.1\r\nX-Slow: "[n:n + 1] or b"a")
                    n += 1
                elif kind == 3:
                    w.write(b" ")
                if kind in (1, 3):
                    await w.drain()
        except Exception:
            stats["closed_by_server"] += 1
        finally:
            open_now[0] -= 1
            w.close()
        await asyncio.sleep(0.5)

async def main():
    async def report():
        while True:
            await asyncio.sleep(1)
            print(json.dumps({"open": open_now[0]}), flush=True)
    rep = asyncio.create_task(report())
    await asyncio.gather(*(one(i) for i in range(conns)))
    rep.cancel()
    print(json.dumps(dict(stats, peak_open=peak[0], final=True)), flush=True)

asyncio.run(main())
'''

try:
    root, home = os.path.join(work, "store"), os.path.join(work, "home")
    os.makedirs(home)
    env = dict(os.environ, AGENT_STORE_ROOT=root, HOME=home, RUST_LOG="warn")
    subprocess.run([f"{bin_dir}/orchestrator", "init"], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    bus_sock, conf = os.path.join(work, "bus.sock"), os.path.join(work, "bus.conf")
    with open(conf, "w") as f:
        f.write('<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN" '
                '"http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">'
                f'<busconfig><type>custom</type><listen>unix:path={bus_sock}</listen>'
                '<auth>EXTERNAL</auth><policy context="default"><allow user="*"/>'
                '<allow own="*"/><allow send_destination="*"/><allow receive_sender="*"/>'
                '</policy></busconfig>')
    bus = subprocess.Popen(["dbus-daemon", f"--config-file={conf}", "--nofork",
                            "--print-address=1"], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True)
    procs.append(bus)
    env["DBUS_SESSION_BUS_ADDRESS"] = bus.stdout.readline().strip()
    d = subprocess.Popen([f"{bin_dir}/orchestratord", "--bus", "session", "--idle-exit", "0",
                          "--root", root], env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    procs.append(d)
    while subprocess.run(["busctl", "--address", env["DBUS_SESSION_BUS_ADDRESS"], "status",
                          "org.agentstore.Orchestrator1"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL).returncode:
        time.sleep(0.05)

    http_sock = os.path.join(work, "http.sock")
    u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    u.bind(http_sock)
    os.chmod(http_sock, 0o777)
    u.listen(4096)
    hi = os.dup2(u.fileno(), 100, inheritable=False)
    t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    t.bind(("127.0.0.1", 0))
    t.listen(4096)
    port = t.getsockname()[1]
    os.dup2(t.fileno(), 101, inheritable=False)

    def listeners():
        os.dup2(100, 3, inheritable=True)
        os.dup2(101, 4, inheritable=True)

    web = subprocess.Popen(["sh", "-c", 'ulimit -n 1024; LISTEN_PID=$$ exec "$0" "$@"',
                            f"{bin_dir}/agentstore-web", "--bus", "session", "--root", root,
                            "--idle-exit", "0"] + web_args,
                           env=dict(env, LISTEN_FDS="2", LISTEN_FDNAMES="http:tcp"),
                           close_fds=False, preexec_fn=listeners,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    procs.append(web)
    token_file = os.path.join(home, ".config/agentstore/web-token")
    token = None

    def request(path):
        t0 = time.monotonic()
        try:
            if transport == "tcp":
                c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                c.settimeout(10)
                c.connect(("127.0.0.1", port))
                auth = f"Authorization: Bearer {token}\r\n"
            else:
                c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                c.settimeout(10)
                c.connect(http_sock)
                auth = ""
            c.sendall(f"GET {path} HTTP/1.1\r\nHost: localhost\r\n{auth}Connection: close\r\n\r\n"
                      .encode())
            data = b""
            while True:
                got = c.recv(65536)
                if not got:
                    break
                data += got
            c.close()
            status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.1 ") else 0
        except (OSError, ValueError):
            status = 0
        return (time.monotonic() - t0) * 1000, status

    # The server is up when it answers (and has made its TCP token).
    deadline = time.monotonic() + 30
    while token is None:
        try:
            text = open(token_file).read()
            if text.endswith("\n"):
                token = text.strip()
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit("agentstore-web made no token in 30 s")
        time.sleep(0.05)
    while request("/api/v1/whoami")[1] != 200:
        if time.monotonic() > deadline:
            raise SystemExit("agentstore-web did not answer in 30 s")
        time.sleep(0.05)
    base = [request("/api/v1/whoami")[0] for _ in range(50)]
    print(f"before the attack: p50 {pct(base, 50):.1f} ms, p99 {pct(base, 99):.1f} ms", flush=True)

    script = os.path.join(work, "attacker.py")
    with open(script, "w") as f:
        f.write(ATTACKER)
    # A python every account may run (not one under root's home).
    python = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable
    attacker = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                                 "--", python, script,
                                 f"tcp:{port}" if transport == "tcp" else http_sock,
                                 str(conns), str(secs)],
                                stdout=subprocess.PIPE, text=True)
    procs.append(attacker)
    # Measure from when the attacker holds what it can (its count stops rising, or 5 s).
    t_start = time.monotonic()
    last = -1
    opened = []
    while time.monotonic() - t_start < 5:
        line = attacker.stdout.readline()
        n = json.loads(line).get("open", 0)
        opened.append(n)
        if n == last and n > 0:
            break
        last = n
    print(f"attacker holds {opened[-1]} connections after {time.monotonic() - t_start:.1f} s",
          flush=True)
    lat, bad = [], 0
    end = t_start + secs - 1
    i = 0
    while time.monotonic() < end:
        took, status = request("/api/v1/whoami" if i % 2 == 0 else "/api/v1/queues")
        i += 1
        if status != 200:
            bad += 1
            took = max(took, 10000.0) if status == 0 else took
        lat.append(took)
    final = {}
    for line in attacker.stdout:
        v = json.loads(line)
        if v.get("final"):
            final = v
    attacker.wait()
    rss = [l.split()[1] for l in open(f"/proc/{web.pid}/status") if l.startswith("VmHWM")]
    print()
    print(f"== agentstore-web under {conns} slow connections from uid 65534 over {transport} "
          f"for {secs:.0f} s (server args: {' '.join(web_args) or 'defaults'})")
    who = "the token holder over TCP" if transport == "tcp" else "root"
    print(f"other caller ({who}), {len(lat)} requests, each on a new connection: "
          f"p50 {pct(lat, 50):.1f} ms  p99 {pct(lat, 99):.1f} ms  max {max(lat):.1f} ms  "
          f"not answered 200: {bad}")
    print(f"attacker: {final}")
    print(f"agentstore-web peak RSS: {rss[0]} KiB")
    verdict = pct(lat, 99) < 1000 and bad == 0
    print("PASS: p99 under 1 s" if verdict else "FAIL: p99 1 s or more, or requests unanswered")
    sys.exit(0 if verdict else 1)
finally:
    for p in reversed(procs):
        p.kill()
        p.wait()
PY
