#!/usr/bin/env bash
# Benchmark (issue 18, scale): cost per event against the size of the store's history.
#   bash benches/scale.sh [SIZES...]        (default: 10000 100000)
#   PROFILE=debug bash benches/scale.sh     (use target/debug instead of a release build)
#   NO_BUILD=1 bash benches/scale.sh        (use the release binaries as they are)
#   NO_BUILD=1 BIN=DIR bash …               (the binaries in DIR)
# For each size N it builds a store directly on disk (a fast generator writes the job files:
# N already-handled finished jobs with a handled-log, plus N queued jobs in a second queue)
# and measures:
#   - orchestratord start → READY, and → end of the first pass (sd_notify STATUS after it)
#   - inbox → outbox answer p50/p99 (100 messages, one at a time) with N finished jobs
#   - queue-manager start → READY with N jobs in queued_jobs/
#   - orchestrator list-jobs (text, json) wall time and peak RSS (/usr/bin/time): without a
#     job index yet (first run) and warm; peers: find (names only), find | xargs cat
#   - ListJobs paged over D-Bus (all pages): wall time, daemon RSS after (VmRSS, VmHWM)
#   - the daemon's peak and resident memory after each other listing at that size: a ListJobs
#     page right after a job landed in the big finished_jobs/ (its index brought up to
#     date), list-messages pages over N requests + N answers (Submit), a 2 MiB list-jobs
#     (Submit); and the CLI's list-messages page (time, peak RSS)
#   - as root: the CLI's D-Bus path (user nobody, store mode 0700), text and json
#   - the load average next to the listings (the machine may be shared)
# Peer: pueue (crates.io; `cargo install --locked pueue`, or PUEUE_INSTALL=1 builds it into
# target/peer/), with N done tasks in its state (one real task, copied N times):
#   - pueued start → its first `pueue status` answer (against orchestratord's first pass)
#   - `pueue add` round trip p50/p99 (a client process each; against inbox → answer)
#   - `pueue status` text and --json: wall time and peak RSS; pueued RSS after
#     (against the CLI's list-jobs and orchestratord's RSS)
# Without pueue the table says "not installed" in its rows (PUEUE=0: not asked for).
# Needs python3, dbus-daemon, busctl and GNU time.
set -euo pipefail
cd "$(dirname "$0")/.."
profile=${PROFILE:-release}
if [ "$profile" = release ] && [ -z "${NO_BUILD:-}" ]; then
    cargo build --release --bins -q
fi
bin=$(realpath "${BIN:-$PWD/target/$profile}")
pueue_dir=""
if [ "${PUEUE:-1}" != 0 ]; then
    if [ -n "${PUEUE_INSTALL:-}" ] && ! [ -x target/peer/bin/pueued ]; then
        cargo install --locked pueue --root "$PWD/target/peer"
    fi
    for d in "$PWD/target/peer/bin" $(dirname "$(command -v pueued 2>/dev/null || echo /nonexistent/x)"); do
        if [ -x "$d/pueued" ] && [ -x "$d/pueue" ]; then pueue_dir=$d; break; fi
    done
fi
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(10000 100000)
work=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT
results=$work/results.tsv
: >"$results"

python3 - "$bin" "$work" "$results" "$pueue_dir" "${sizes[@]}" <<'PY'
import atexit, json, os, socket, subprocess, sys, time, statistics, uuid, shutil

bin_dir, work, results, pueue_dir = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
sizes = [int(s) for s in sys.argv[5:]]
env0 = dict(os.environ)
# Another user (nobody) must reach the bus socket in here; the store itself is closed to it.
os.chmod(work, 0o755)

# Daemons this script started are stopped however it ends (a failed check included).
started = []
atexit.register(lambda: [p.kill() for p in started if p.poll() is None])
_popen = subprocess.Popen
def Popen(*a, **k):
    p = _popen(*a, **k)
    started.append(p)
    return p
subprocess.Popen = Popen

def row(size, what, value):
    with open(results, "a") as f:
        f.write(f"{size}\t{what}\t{value}\n")
    print(f"  {what}: {value}", flush=True)

def job(i, status, handled):
    t = "2025-%02d-%02dT%02d:%02d:%02dZ" % (1 + i // 2_000_000 % 12, 1 + i // 86400 % 28,
                                         i // 3600 % 24, i // 60 % 60, i % 60)
    return {"config": {"project": "P", "working_directory": "/tmp", "queue_time": t,
                       "jobtype": "noop", "claude_command": "noop", "claude_extra_args": [],
                       "task_description": "bench", "supporting_data": {}, "timeout_seconds": 60},
            "runtime": {"status": status, "start_time": None, "finish_time": None,
                        "process_id": None, "llm_process_id": None, "error": None,
                        "output": "done" if status == "finished" else None,
                        **({"handled": True} if handled else {})}}

def build(n):
    root = os.path.join(work, f"store-{n}")
    home = os.path.join(work, "home")
    os.makedirs(home, exist_ok=True)
    env = dict(env0, AGENT_STORE_ROOT=root, HOME=home)
    subprocess.run([f"{bin_dir}/orchestrator", "init"], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run([f"{bin_dir}/orchestrator", "add-queue", "bulk"], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    os.makedirs(os.path.join(root, "projects/P"), exist_ok=True)
    with open(os.path.join(root, "projects/P/project.json"), "w") as f:
        json.dump({"id": "P", "directory": "/tmp", "create_time": "2025-01-01T00:00:00Z",
                   "update_time": "2025-01-01T00:00:00Z", "owner": "bench",
                   "default_queue": "poplar"}, f)
    fin = os.path.join(root, "Queues/poplar/Jobs/finished_jobs")
    qd = os.path.join(root, "Queues/bulk/Jobs/queued_jobs")
    os.makedirs(fin, exist_ok=True)
    os.makedirs(qd, exist_ok=True)
    logdir = os.path.join(root, "logs/handled-jobs")
    os.makedirs(logdir, exist_ok=True)
    lines = []
    for i in range(n):
        with open(os.path.join(fin, "f-%06d.json" % i), "w") as f:
            json.dump(job(i, "finished", True), f)
        lines.append("poplar/f-%06d\n" % i)
        with open(os.path.join(qd, "q-%06d.json" % i), "w") as f:
            json.dump(job(i, "queued", False), f)
    with open(os.path.join(logdir, "generator.log"), "w") as f:
        f.writelines(lines)
    # n requests in processed_inbox/ and their n answers in processed_outbox/.
    pi = os.path.join(root, "messaging/processed_inbox")
    po = os.path.join(root, "messaging/processed_outbox")
    os.makedirs(pi, exist_ok=True)
    os.makedirs(po, exist_ok=True)
    for i in range(n):
        cid = "msg-%06d" % i
        t = job(i, "queued", False)["config"]["queue_time"]
        req = {"correlation_id": cid, "source": "user", "project": "P", "queue_time": t,
               "processed_time": t, "command": "list-queues", "content": {}, "status": "done",
               "error": None}
        with open(os.path.join(pi, cid + ".json"), "w") as f:
            json.dump(req, f)
        with open(os.path.join(po, cid + ".json"), "w") as f:
            json.dump(dict(req, source="orchestrator", content={"result": ["poplar", "bulk"]}), f)
    # The bulk queue is paused: its manager only indexes, it starts nothing.
    qp = os.path.join(root, "Queues/bulk/queue.json")
    q = json.load(open(qp))
    q["runtime"]["paused"] = True
    json.dump(q, open(qp, "w"))
    return root, env

def notify_socket():
    path = os.path.join(work, "notify-%s" % uuid.uuid4().hex[:8])
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(path)
    return s, path

def wait_notify(sock, key, limit=600):
    sock.settimeout(limit)
    while True:
        msg = sock.recv(65536).decode(errors="replace")
        if any(key in l for l in msg.split("\n")):
            return time.monotonic()

def rss(pid):
    out = {}
    for l in open(f"/proc/{pid}/status"):
        k, _, v = l.partition(":")
        if k in ("VmRSS", "VmHWM"):
            out[k] = int(v.split()[0]) // 1024
    return out

last_cpu = [0.0]

def peak(cmd, env):
    """Wall time (s) and peak RSS (MiB); the CPU time (user + system) goes to last_cpu."""
    t0 = time.monotonic()
    r = subprocess.run(["/usr/bin/time", "-f", "%U %S %M"] + cmd, env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=True)
    u, s, m = r.stderr.strip().splitlines()[-1].split()
    last_cpu[0] = float(u) + float(s)
    return time.monotonic() - t0, int(m) // 1024

def pueue_peer(n):
    """pueue with n done tasks: start, add round trip, status (see the header)."""
    d = os.path.join(work, f"pueue-{n}")
    os.makedirs(d)
    cfg = os.path.join(d, "pueue.yml")
    with open(cfg, "w") as f:
        f.write(f"shared:\n  pueue_directory: {d}\n  runtime_directory: {d}\n"
                f"  use_unix_socket: true\n  unix_socket_path: {d}/pueue.socket\n")
    # A small environment: pueue stores each task's environment in its state.
    penv = {"PATH": f"{pueue_dir}:/usr/bin:/bin", "HOME": d, "PUEUE_CONFIG_PATH": cfg}
    pueue = lambda *a, **kw: subprocess.run([f"{pueue_dir}/pueue", *a], env=penv,
                                            stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL, **kw)
    def start():
        p = subprocess.Popen([f"{pueue_dir}/pueued"], env=penv, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        while pueue("status", "--json").returncode:
            if p.poll() is not None:
                raise SystemExit(f"pueued exited {p.returncode}")
            time.sleep(0.002)
        return p
    p = start()
    pueue("add", "--", "true", check=True)
    pueue("wait", check=True)
    pueue("shutdown")
    p.wait()
    state = os.path.join(d, "state.json")
    st = json.load(open(state))
    one = st["tasks"]["0"]
    st["tasks"] = {str(i): dict(one, id=i) for i in range(n)}
    with open(state, "w") as f:
        json.dump(st, f)
    del st
    t0 = time.monotonic()
    p = start()
    row(n, "peer: pueued start→first status answer (ms)", "%.0f" % ((time.monotonic() - t0) * 1000))
    pueue("pause", check=True)
    lat = []
    for _ in range(100):
        t = time.monotonic()
        pueue("add", "--", "true", check=True)
        lat.append((time.monotonic() - t) * 1000)
    lat.sort()
    row(n, "peer: pueue add round trip p50 (ms)", "%.1f" % statistics.median(lat))
    row(n, "peer: pueue add round trip p99 (ms)", "%.1f" % lat[98])
    for fmt, args in (("text", ["status"]), ("json", ["status", "--json"])):
        cmd = [f"{pueue_dir}/pueue", *args]
        peak(cmd, penv)
        t, m = peak(cmd, penv)
        row(n, f"peer: pueue {' '.join(args)} (N tasks): time (s)", "%.2f" % t)
        row(n, f"peer: pueue {' '.join(args)} (N tasks): peak RSS (MiB)", m)
    m = rss(p.pid)
    row(n, "peer: pueued RSS after (MiB)", m["VmRSS"])
    row(n, "peer: pueued peak RSS (VmHWM, MiB)", m["VmHWM"])
    pueue("shutdown")
    p.wait()
    shutil.rmtree(d)

for n in sizes:
    print(f"== {n} finished jobs (+ {n} queued in a second queue)", flush=True)
    t0 = time.monotonic()
    root, env = build(n)
    row(n, "store generated (s)", "%.1f" % (time.monotonic() - t0))
    subprocess.run(["sync"])

    # orchestratord: start → READY → first pass (STATUS after the first cycle).
    sock, path = notify_socket()
    t0 = time.monotonic()
    d = subprocess.Popen([f"{bin_dir}/orchestratord", "--bus", "none", "--idle-exit", "0",
                          "--root", root], env=dict(env, NOTIFY_SOCKET=path, RUST_LOG="warn"),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ready = wait_notify(sock, "READY=1")
    first = wait_notify(sock, "messages answered")
    row(n, "orchestratord start→READY (ms)", "%.0f" % ((ready - t0) * 1000))
    row(n, "orchestratord start→first pass (ms)", "%.0f" % ((first - t0) * 1000))
    # Stop listening: a full, unread notify socket would block the daemon's sd_notify.
    sock.close(); os.unlink(path)

    # inbox → answer, one message at a time.
    inbox, outbox = os.path.join(root, "messaging/inbox"), os.path.join(root, "messaging/outbox")
    lat = []
    for i in range(100):
        cid = "bench-%d-%d" % (n, i)
        msg = {"correlation_id": cid, "source": "user", "project": None,
               "queue_time": "2025-10-25T10:00:00Z", "processed_time": None,
               "command": "list-queues", "content": {}, "status": "queued", "error": None}
        tmp = os.path.join(inbox, "." + cid + ".tmp")
        with open(tmp, "w") as f:
            json.dump(msg, f)
        t = time.monotonic()
        os.rename(tmp, os.path.join(inbox, cid + ".json"))
        answer = os.path.join(outbox, cid + ".json")
        while not os.path.exists(answer):
            time.sleep(0.0002)
        lat.append((time.monotonic() - t) * 1000)
    lat.sort()
    row(n, "inbox→answer p50 (ms)", "%.1f" % statistics.median(lat))
    row(n, "inbox→answer p99 (ms)", "%.1f" % lat[98])
    row(n, "orchestratord RSS after (MiB)", rss(d.pid)["VmRSS"])
    d.kill(); d.wait()

    # queue-manager READY with n queued jobs.
    sock, path = notify_socket()
    t0 = time.monotonic()
    qm = subprocess.Popen([f"{bin_dir}/queue-manager", "--queue", "bulk", "--root", root,
                           "--bus", "none", "--launcher", "direct"],
                          env=dict(env, NOTIFY_SOCKET=path, RUST_LOG="warn"),
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ready = wait_notify(sock, "READY=1")
    row(n, "queue-manager start→READY (ms)", "%.0f" % ((ready - t0) * 1000))
    qm.kill(); qm.wait(); sock.close(); os.unlink(path)

    row(n, "load average (1 min) before listings", open("/proc/loadavg").read().split()[0])
    # Peers for a listing: the names alone (find), every document's bytes (find | cat).
    t0 = time.monotonic()
    subprocess.run(["find", os.path.join(root, "Queues"), "-name", "*.json"], check=True,
                   stdout=subprocess.DEVNULL)
    row(n, "peer: find (names of 2N jobs) (s)", "%.2f" % (time.monotonic() - t0))
    t0 = time.monotonic()
    subprocess.run("find %s -name '*.json' -print0 | xargs -0 cat >/dev/null"
                   % os.path.join(root, "Queues"), shell=True, check=True)
    row(n, "peer: find | xargs cat (every document) (s)", "%.2f" % (time.monotonic() - t0))
    # CLI list-jobs over 2n jobs: the first run builds the job index (page cache warm), the
    # second is warm.
    for fmt in ("text", "json"):
        cmd = [f"{bin_dir}/orchestrator", "list-jobs", "--format", fmt]
        if fmt == "text":
            shutil.rmtree(os.path.join(env["HOME"], ".cache"), ignore_errors=True)
            t, m = peak(cmd, env)
            row(n, f"CLI list-jobs {fmt} (2N jobs), no index yet: time (s)", "%.2f" % t)
            row(n, f"CLI list-jobs {fmt} (2N jobs), no index yet: peak RSS (MiB)", m)
        peak(cmd, env)
        t, m = peak(cmd, env)
        row(n, f"CLI list-jobs {fmt} (2N jobs): time (s)", "%.2f" % t)
        row(n, f"CLI list-jobs {fmt} (2N jobs): CPU user+sys (s)", "%.2f" % last_cpu[0])
        row(n, f"CLI list-jobs {fmt} (2N jobs): peak RSS (MiB)", m)

    # list-messages over 2N messages (no index: every file is read once per listing).
    cmd = [f"{bin_dir}/orchestrator", "list-messages", "--limit", "50"]
    peak(cmd, env)
    t, m = peak(cmd, env)
    row(n, "CLI list-messages --limit 50 (2N messages): time (s)", "%.2f" % t)
    row(n, "CLI list-messages --limit 50 (2N messages): peak RSS (MiB)", m)

    # ListJobs paged over D-Bus (a private bus any local user may use, like the system bus).
    sockp = os.path.join(work, "bus-%d.sock" % n)
    conf = os.path.join(work, "bus-%d.conf" % n)
    with open(conf, "w") as f:
        f.write('<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN" '
                '"http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">'
                f'<busconfig><type>custom</type><listen>unix:path={sockp}</listen>'
                '<auth>EXTERNAL</auth><policy context="default"><allow user="*"/>'
                '<allow own="*"/><allow send_destination="*"/><allow receive_sender="*"/>'
                '</policy></busconfig>')
    bus = subprocess.Popen(["dbus-daemon", f"--config-file={conf}", "--nofork",
                            "--print-address=1"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    addr = bus.stdout.readline().strip()
    os.chmod(sockp, 0o777)
    benv = dict(env, DBUS_SESSION_BUS_ADDRESS=addr, RUST_LOG="warn")
    d = subprocess.Popen([f"{bin_dir}/orchestratord", "--bus", "session", "--idle-exit", "0",
                          "--root", root], env=benv, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    while subprocess.run(["busctl", "--address", addr, "status", "org.agentstore.Orchestrator1"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode:
        time.sleep(0.05)
    row(n, "orchestratord RSS before listing (MiB)", rss(d.pid)["VmRSS"])
    t0 = time.monotonic()
    offset, pages, listed = 0, 0, 0
    while True:
        r = subprocess.run(["busctl", "--address", addr, "--json=short", "call",
                            "org.agentstore.Orchestrator1", "/org/agentstore/Orchestrator1",
                            "org.agentstore.Orchestrator1", "ListJobs", "a{ss}uu", "0",
                            str(offset), "5000"], env=benv, capture_output=True, text=True,
                           check=True)
        page, total, nxt = json.loads(r.stdout)["data"]
        listed += len(json.loads(page))
        pages += 1
        if nxt >= total or nxt <= offset:
            break
        offset = nxt
    assert listed == 2 * n, (listed, n)
    row(n, "ListJobs over D-Bus, all pages of 2N jobs (s)", "%.2f" % (time.monotonic() - t0))
    row(n, "ListJobs pages", pages)
    m = rss(d.pid)
    row(n, "orchestratord RSS after paged listing (MiB)", m["VmRSS"])
    row(n, "orchestratord peak RSS (VmHWM, MiB)", m["VmHWM"])

    def call(method, sig, *args):
        return subprocess.run(["busctl", "--address", addr, "--json=short", "--timeout=600",
                               "call", "org.agentstore.Orchestrator1",
                               "/org/agentstore/Orchestrator1", "org.agentstore.Orchestrator1",
                               method, sig, *args], env=benv, capture_output=True, text=True)

    # A job lands in the big finished_jobs/: the next listing brings its index up to date.
    with open(os.path.join(root, "Queues/poplar/Jobs/finished_jobs/late-1.json"), "w") as f:
        json.dump(job(n, "finished", False), f)
    r = call("ListJobs", "a{ss}uu", "0", "0", "10")
    assert r.returncode == 0, r.stderr
    m = rss(d.pid)
    row(n, "ListJobs page of 10 after a change: orchestratord VmRSS / VmHWM (MiB)",
        "%d / %d" % (m["VmRSS"], m["VmHWM"]))
    for what, content in (("list-messages limit 50", {"limit": 50}),
                          ("list-messages offset N limit 50", {"offset": n, "limit": 50}),
                          ("list-jobs limit 4000", {"limit": 4000})):
        command = what.split()[0]
        r = call("Submit", "s", json.dumps({"command": command, "content": content}))
        assert r.returncode == 0, r.stderr
        m = rss(d.pid)
        row(n, f"Submit {what}: orchestratord VmRSS / VmHWM (MiB)",
            "%d / %d" % (m["VmRSS"], m["VmHWM"]))

    # The CLI's D-Bus path: a user who cannot read the store (mode 0700) lists through the
    # daemon, which maps the caller's Unix user (nobody) to an admin user of the store.
    if os.geteuid() == 0 and shutil.which("runuser"):
        subprocess.run([f"{bin_dir}/orchestrator", "add-user", "nob", "--name", "N",
                        "--email", "n@x", "--unix-user", "nobody", "--permissions", "admin"],
                       env=env, check=True, stdout=subprocess.DEVNULL)
        os.chmod(root, 0o700)
        for fmt in ("text", "json"):
            cmd = ["runuser", "-u", "nobody", "--", "/usr/bin/time", "-f", "%M", "env",
                   "HOME=/nonexistent", "AGENTSTORE_BUS=session",
                   f"DBUS_SESSION_BUS_ADDRESS={addr}", f"{bin_dir}/orchestrator", "--root", root,
                   "list-jobs", "--format", fmt]
            t0 = time.monotonic()
            r = subprocess.run(cmd, capture_output=True, text=True, check=True)
            t = time.monotonic() - t0
            lines = r.stdout.count("\n")
            row(n, f"CLI list-jobs {fmt} over D-Bus (2N jobs): time (s)", "%.2f" % t)
            row(n, f"CLI list-jobs {fmt} over D-Bus (2N jobs): peak RSS (MiB)",
                int(r.stderr.strip().splitlines()[-1]) // 1024)
            if fmt == "text":
                # 2N jobs, the late one, the header.
                assert lines == 2 * n + 2, (lines, n)
        os.chmod(root, 0o755)
        m = rss(d.pid)
        row(n, "orchestratord RSS after CLI listings over D-Bus (MiB)", m["VmRSS"])
        row(n, "orchestratord peak RSS (VmHWM, MiB)", m["VmHWM"])
    row(n, "load average (1 min) after listings", open("/proc/loadavg").read().split()[0])
    d.kill(); d.wait(); bus.kill(); bus.wait()
    shutil.rmtree(root)
    if pueue_dir:
        pueue_peer(n)
    else:
        row(n, "peer pueue", "not installed")

PY

echo
echo "== summary ($profile build)"
python3 - "$results" "${sizes[@]}" <<'PY'
import sys
rows, sizes = {}, sys.argv[2:]
order = []
for l in open(sys.argv[1]):
    n, what, v = l.rstrip("\n").split("\t")
    if what not in rows:
        rows[what] = {}
        order.append(what)
    rows[what][n] = v
w = max(len(k) for k in order)
print(f"{'measure':<{w}}  " + "  ".join(f"{s:>10}" for s in sizes))
for k in order:
    print(f"{k:<{w}}  " + "  ".join(f"{rows[k].get(s, '-'):>10}" for s in sizes))
PY
