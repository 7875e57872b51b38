#!/usr/bin/env bash
# Benchmark (issue 16): the HTTP API and the dashboard on a store of N jobs (default 100,000).
#   bash benches/web.sh [N]            (builds the release binaries first)
#   NO_BUILD=1 bash benches/web.sh     (uses target/release as it is)
#   BIN=target/debug NO_BUILD=1 …      (other binaries, e.g. to try the script quickly)
#   REQS=50 bash benches/web.sh        (requests per API figure; ≥ 50)
# Builds the store directly on disk (two projects, three commands, queued/finished/failed;
# finished and failed already handled, so orchestratord has nothing to do), starts a private
# dbus-daemon, orchestratord on it and agentstore-web with a Unix listener and a loopback TCP
# listener passed as systemd does (LISTEN_FDS/LISTEN_FDNAMES/LISTEN_PID), and measures, one
# request at a time over a kept-alive connection on the Unix socket:
#   - GET /api/v1/jobs?limit=50 (first page), filtered (project + status), deep (offset N-50),
#     GET /api/v1/jobs/<id> (the job page's document), GET /jobs (dashboard HTML, time to last
#     byte), p50 and p99;
#   - peers in the same run: `busctl call … ListJobs` of the same page (a process per call;
#     a `busctl … Peer Ping` per call is shown as that process's own cost), and the CLI
#     `orchestrator list-jobs --project … --status …` (the whole filtered listing);
#   - the dashboard's jobs page in headless Chromium over TCP (first-contentful-paint from
#     the Performance API over CDP, --remote-debugging-pipe), p50 of 10 loads;
#   - agentstore-web's RSS after all of it.
# Prints one table. Needs python3, dbus-daemon, busctl, chromium (the Chromium rows are left
# out, saying so, when it is missing).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${NO_BUILD:-}" ]; then
    cargo build --release --bins -q
fi
bin=${BIN:-$PWD/target/release}
n=${1:-100000}
reqs=${REQS:-50}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

python3 - "$bin" "$work" "$n" "$reqs" <<'PY'
import http.client, json, os, shutil, socket, statistics, subprocess, sys, time

bin_dir, work, n, reqs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
rows = []
procs = []

def row(what, p50, p99="", peer=""):
    rows.append((what, p50, p99, peer))
    print(f"  {what}: {p50} {p99} {peer}", flush=True)

def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]

def ms(x):
    return "%.1f" % x

try:
    # -- the store
    root, home = os.path.join(work, "store"), os.path.join(work, "home")
    os.makedirs(home)
    env = dict(os.environ, AGENT_STORE_ROOT=root, HOME=home, RUST_LOG="warn")
    subprocess.run([f"{bin_dir}/orchestrator", "init"], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    queue = sorted(os.listdir(os.path.join(root, "Queues")))[0]
    for p in ("Alpha", "Beta"):
        os.makedirs(os.path.join(root, "projects", p), exist_ok=True)
        with open(os.path.join(root, "projects", p, "project.json"), "w") as f:
            json.dump({"id": p, "directory": "/tmp", "create_time": "2026-01-01T00:00:00Z",
                       "update_time": "2026-01-01T00:00:00Z", "owner": "bench",
                       "default_queue": queue}, f)
    t0 = time.monotonic()
    jobs = os.path.join(root, "Queues", queue, "Jobs")
    handled = []
    commands = ["research-code", "create-prd", "implement-tasks"]
    for i in range(n):
        st = "queued" if i % 50 == 7 else "failed" if i % 10 == 3 else "finished"
        s = i * 8
        q = "2026-%02d-%02dT%02d:%02d:%02dZ" % (1 + s // (28 * 86400) % 12, 1 + s // 86400 % 28,
                                             s // 3600 % 24, s // 60 % 60, s % 60)
        if st == "queued":
            rt = {"status": "queued", "start_time": None, "finish_time": None,
                  "process_id": None, "llm_process_id": None, "error": None, "output": None}
        else:
            out = json.dumps({"type": "result", "result": "Result text for job %d" % i,
                              "total_cost_usd": 0.01 * (i % 5 + 1), "num_turns": i % 7 + 1})
            rt = {"status": st, "start_time": q, "finish_time": q, "process_id": None,
                  "llm_process_id": None, "error": "it broke" if st == "failed" else None,
                  "output": out, "cost_usd": 0.01 * (i % 5 + 1), "num_turns": i % 7 + 1,
                  "handled": True}
            handled.append("%s/job-%06d\n" % (queue, i))
        job = {"config": {"project": "Alpha" if i % 2 == 0 else "Beta",
                          "working_directory": "/tmp", "queue_time": q, "jobtype": "noop",
                          "claude_command": commands[i % 3], "claude_extra_args": [],
                          "task_description": "Task %d" % i, "supporting_data": {},
                          "timeout_seconds": 60, "user": "bench"},
               "runtime": rt}
        d = os.path.join(jobs, st + "_jobs")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "job-%06d.json" % i), "w") as f:
            json.dump(job, f)
    os.makedirs(os.path.join(root, "logs/handled-jobs"), exist_ok=True)
    with open(os.path.join(root, "logs/handled-jobs/generator.log"), "w") as f:
        f.writelines(handled)
    print(f"store: {n} jobs in {time.monotonic() - t0:.0f} s", flush=True)

    # -- a private bus, orchestratord, agentstore-web
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
    addr = bus.stdout.readline().strip()
    env["DBUS_SESSION_BUS_ADDRESS"] = addr
    d = subprocess.Popen([f"{bin_dir}/orchestratord", "--bus", "session", "--idle-exit", "0",
                          "--root", root], env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    procs.append(d)
    busctl = ["busctl", "--address", addr]
    while subprocess.run(busctl + ["status", "org.agentstore.Orchestrator1"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode:
        time.sleep(0.05)

    http_sock = os.path.join(work, "http.sock")
    u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    u.bind(http_sock)
    u.listen(64)
    t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    t.bind(("127.0.0.1", 0))
    t.listen(64)
    port = t.getsockname()[1]
    fds = [os.dup(u.fileno()), os.dup(t.fileno())]
    fds = [os.dup2(f, 100 + i, inheritable=False) for i, f in enumerate(fds)]

    def as_listeners():
        for i, f in enumerate(fds):
            os.dup2(f, 3 + i, inheritable=True)

    web = subprocess.Popen(["sh", "-c", 'LISTEN_PID=$$ exec "$0" "$@"',
                            f"{bin_dir}/agentstore-web", "--bus", "session", "--root", root,
                            "--idle-exit", "0"],
                           env=dict(env, LISTEN_FDS="2", LISTEN_FDNAMES="http:tcp"),
                           close_fds=False, preexec_fn=as_listeners,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    procs.append(web)
    token_file = os.path.join(home, ".config/agentstore/web-token")
    while not os.path.exists(token_file):
        time.sleep(0.05)
    token = open(token_file).read().strip()

    class Unix(http.client.HTTPConnection):
        def connect(self):
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.connect(http_sock)

    conn = Unix("localhost")

    def get(path):
        t0 = time.monotonic()
        conn.request("GET", path)
        r = conn.getresponse()
        body = r.read()
        took = (time.monotonic() - t0) * 1000
        if r.status != 200:
            raise SystemExit(f"GET {path}: {r.status} {body[:300]!r}")
        return took, body

    def busctl_page(filt, offset, limit):
        args = busctl + ["--json=short", "call", "org.agentstore.Orchestrator1",
                         "/org/agentstore/Orchestrator1", "org.agentstore.Orchestrator1",
                         "ListJobs", "a{ss}uu", str(len(filt))]
        for k, v in filt.items():
            args += [k, v]
        args += [str(offset), str(limit)]
        t0 = time.monotonic()
        r = subprocess.run(args, env=env, capture_output=True, text=True, check=True)
        took = (time.monotonic() - t0) * 1000
        return took, json.loads(r.stdout)["data"]

    def ping():
        t0 = time.monotonic()
        subprocess.run(busctl + ["call", "org.agentstore.Orchestrator1",
                                 "/org/agentstore/Orchestrator1", "org.freedesktop.DBus.Peer",
                                 "Ping"], env=env, check=True, stdout=subprocess.DEVNULL)
        return (time.monotonic() - t0) * 1000

    # Warm: the first listing builds orchestratord's job index.
    t0 = time.monotonic()
    took, body = get("/api/v1/jobs?limit=50")
    page = json.loads(body)
    assert page["total"] == n, (page["total"], n)
    assert len(page["jobs"]) == 50
    row("first listing after start (index build), ms", ms((time.monotonic() - t0) * 1000))
    print("load average (1 min) before:", open("/proc/loadavg").read().split()[0], flush=True)

    cases = [
        ("API first page (limit=50)", "/api/v1/jobs?limit=50", ({}, 0, 50)),
        ("API filtered page (project+status=failed)",
         "/api/v1/jobs?project=Beta&status=failed&limit=50",
         ({"project": "Beta", "status": "failed"}, 0, 50)),
        (f"API deep page (offset {n - 50})", f"/api/v1/jobs?offset={n - 50}&limit=50",
         ({}, n - 50, 50)),
    ]
    for what, path, (filt, off, lim) in cases:
        lat, peer = [], []
        for _ in range(reqs):
            took, body = get(path)
            lat.append(took)
            assert len(json.loads(body)["jobs"]) == 50, path
            took, data = busctl_page(filt, off, lim)
            peer.append(took)
            assert len(json.loads(data[0])) == 50
        row(what, ms(pct(lat, 50)), ms(pct(lat, 99)),
            f"busctl ListJobs p50 {ms(pct(peer, 50))} p99 {ms(pct(peer, 99))}")
    pings = [ping() for _ in range(reqs)]
    row("peer: busctl Peer.Ping (a busctl process alone)", ms(pct(pings, 50)),
        ms(pct(pings, 99)))

    job_id = "job-%06d" % (n // 2 + 3)
    lat = [get(f"/api/v1/jobs/{job_id}")[0] for _ in range(reqs)]
    row(f"API job document (/api/v1/jobs/{job_id})", ms(pct(lat, 50)), ms(pct(lat, 99)))
    lat = [get(f"/jobs/{job_id}")[0] for _ in range(reqs)]
    row("dashboard job page HTML, time to last byte", ms(pct(lat, 50)), ms(pct(lat, 99)))
    lat = []
    for _ in range(reqs):
        took, body = get("/jobs")
        lat.append(took)
        assert body.count(b"<tr data-job=") == 100
    row("dashboard jobs page HTML (100 rows), time to last byte", ms(pct(lat, 50)),
        ms(pct(lat, 99)))
    lat = [get("/jobs?project=Beta&status=failed")[0] for _ in range(reqs)]
    row("dashboard jobs page filtered, time to last byte", ms(pct(lat, 50)), ms(pct(lat, 99)))

    cli = []
    for _ in range(5):
        t0 = time.monotonic()
        subprocess.run([f"{bin_dir}/orchestrator", "list-jobs", "--project", "Beta", "--status",
                        "failed"], env=env, check=True, stdout=subprocess.DEVNULL)
        cli.append((time.monotonic() - t0) * 1000)
    row("peer: CLI list-jobs --project Beta --status failed (whole list), 5 runs",
        ms(pct(cli, 50)), ms(max(cli)))

    # -- the dashboard in headless Chromium over TCP
    chromium = shutil.which("chromium")
    if not chromium:
        row("dashboard first paint in Chromium", "not measured: chromium is not installed")
    else:
        r_in, w_in = os.pipe()
        r_out, w_out = os.pipe()
        for f, to_fd in ((r_in, 110), (w_out, 111)):
            os.dup2(f, to_fd, inheritable=False)

        def as_pipe():
            os.dup2(110, 3, inheritable=True)
            os.dup2(111, 4, inheritable=True)

        profile = os.path.join(work, "chromium-profile")
        ch = subprocess.Popen([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                               "--remote-debugging-pipe", "--no-first-run",
                               "--window-size=1280,900", f"--user-data-dir={profile}",
                               "about:blank"], close_fds=False, preexec_fn=as_pipe,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(ch)
        for f in (r_in, w_out, 110, 111):
            os.close(f)
        to, frm = os.fdopen(w_in, "wb"), os.fdopen(r_out, "rb")
        ids = [0]
        buf = [b""]

        def call(method, params, session=None):
            ids[0] += 1
            msg = {"id": ids[0], "method": method, "params": params}
            if session:
                msg["sessionId"] = session
            to.write(json.dumps(msg).encode() + b"\0")
            to.flush()
            while True:
                while b"\0" not in buf[0]:
                    chunk = os.read(frm.fileno(), 1 << 16)
                    if not chunk:
                        raise SystemExit("chromium closed the pipe")
                    buf[0] += chunk
                one, buf[0] = buf[0].split(b"\0", 1)
                v = json.loads(one)
                if v.get("id") == ids[0]:
                    if "error" in v:
                        raise SystemExit(f"{method}: {v}")
                    return v["result"]

        target = call("Target.createTarget", {"url": "about:blank"})["targetId"]
        sess = call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]

        def ev(expr):
            return call("Runtime.evaluate", {"expression": expr, "returnByValue": True},
                        sess)["result"].get("value")

        def load(url):
            ev("window.__previous = true")
            t0 = time.monotonic()
            call("Page.navigate", {"url": url}, sess)
            while ev("window.__previous === undefined && document.readyState === 'complete'") \
                    is not True:
                time.sleep(0.005)
                if time.monotonic() - t0 > 60:
                    raise SystemExit(f"{url} did not load in 60 s")
            return (time.monotonic() - t0) * 1000

        base = f"http://127.0.0.1:{port}"
        load(f"{base}/login?token={token}&next=/")
        fcp, resp, wall = [], [], []
        for _ in range(10):
            wall.append(load(f"{base}/jobs"))
            rows_seen = ev("document.querySelectorAll('#jobs tbody tr').length")
            assert rows_seen == 100, rows_seen
            m = ev("JSON.stringify({fcp: (performance.getEntriesByName('first-contentful-paint')[0]"
                   " || {}).startTime, resp: performance.getEntriesByType('navigation')[0]"
                   ".responseEnd})")
            m = json.loads(m)
            if m.get("fcp") is not None:
                fcp.append(m["fcp"])
            resp.append(m["resp"])
        row("Chromium /jobs: navigation → responseEnd", ms(pct(resp, 50)), ms(max(resp)))
        if fcp:
            row("Chromium /jobs: first contentful paint", ms(pct(fcp, 50)), ms(max(fcp)))
        else:
            row("Chromium /jobs: first contentful paint", "not reported by this Chromium")
        row("Chromium /jobs: navigate → load complete (CDP round trips)", ms(pct(wall, 50)),
            ms(max(wall)))

    # Activation cost, as systemd gives it: the client connects to a listener no server
    # holds (the kernel queues it), the server is started with that listener
    # (LISTEN_FDS=1), time to the answer's first byte; 10 cold starts.
    act = []
    for i in range(10):
        path = os.path.join(work, f"act-{i}.sock")
        ls = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        ls.bind(path)
        ls.listen(16)
        hi = os.dup2(ls.fileno(), 120, inheritable=False)
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        t0 = time.monotonic()
        c.connect(path)
        c.sendall(b"GET /api/v1/jobs?limit=50 HTTP/1.1\r\nHost: localhost\r\n\r\n")
        srv = subprocess.Popen(["sh", "-c", 'LISTEN_PID=$$ exec "$0" "$@"',
                                f"{bin_dir}/agentstore-web", "--bus", "session", "--root", root,
                                "--idle-exit", "0"],
                               env=dict(env, LISTEN_FDS="1", LISTEN_FDNAMES="http"),
                               close_fds=False,
                               preexec_fn=lambda: os.dup2(120, 3, inheritable=True),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        c.recv(1)
        act.append((time.monotonic() - t0) * 1000)
        srv.kill()
        srv.wait()
        c.close()
        ls.close()
        os.close(hi)
    row("activation: connect on a stopped server → first byte (first page), 10 starts",
        ms(pct(act, 50)), ms(max(act)))

    rss = [l.split()[1] for l in open(f"/proc/{web.pid}/status") if l.startswith(("VmRSS", "VmHWM"))]
    row("agentstore-web RSS / peak (KiB)", rss[1], rss[0])
    print("load average (1 min) after:", open("/proc/loadavg").read().split()[0], flush=True)
finally:
    for p in reversed(procs):
        p.kill()
        p.wait()

print()
print(f"== agentstore-web, {n} jobs, {reqs} requests per row (ms unless said)")
w = max(len(r[0]) for r in rows)
print(f"{'measure':<{w}}  {'p50':>8}  {'p99/max':>8}  peer (same run)")
for what, p50, p99, peer in rows:
    print(f"{what:<{w}}  {p50:>8}  {p99:>8}  {peer}")
PY
