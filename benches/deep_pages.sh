#!/usr/bin/env bash
# Benchmark (issue 33, deep pages): ListJobs pages at any depth, served side by side, and
# list-messages, on a store of N jobs and N requests + N answers (default N = 100,000).
#   bash benches/deep_pages.sh [N]          (builds the release binaries first)
#   NO_BUILD=1 BIN=/path/to/bin bash …      (other binaries: e.g. an older release, "before")
#   REQS=30 CLIENTS=50 PER_CLIENT=8 bash …  (requests per row; the concurrent run's shape)
# Each figure is printed with its floor or peer measured in the same run, and the load
# average (1 min) when the row was taken; medians and minimums (the machine may be shared):
#   - the first listing after start with no index yet (it builds the index), and after a
#     restart with the index kept (what systemd's CacheDirectory= gives);
#   - one client on a kept connection (dbus-python): ListJobs limit 50 at offset 0 (the
#     peer), N/2, N-50, and `after` the place of job N/2 (a cursor); a Peer.Ping round trip
#     on the same connection is the floor; `busctl call` of the deep page (a process per
#     call) beside `busctl call … Peer Ping` (that process's own cost);
#   - CLIENTS clients at once (a thread and a connection each), PER_CLIENT deep pages each:
#     requests/s, p50, p99; the same for the first page; orchestratord's threads before and
#     the most seen while they ran;
#   - Submit list-messages limit 50 at offset 0 and N (2N messages), a filtered page, the
#     first one after start (it builds the message index) and after a restart (index kept),
#     and the daemon's VmHWM;
#   - as root: the CLI over D-Bus as user nobody (store mode 0700), list-jobs and
#     list-messages, text and json, with TMPDIR a folder nobody cannot write.
# Needs /usr/bin/python3 with dbus-python (python3-dbus), dbus-daemon, busctl, runuser.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${NO_BUILD:-}" ]; then
    cargo build --release --bin orchestratord --bin orchestrator -q
fi
bin=${BIN:-$PWD/target/release}
n=${1:-100000}
work=$(mktemp -d)
trap 'chmod -R u+rwX "$work" 2>/dev/null; rm -rf "$work"' EXIT
chmod 755 "$work"

/usr/bin/python3 - "$bin" "$work" "$n" "${REQS:-30}" "${CLIENTS:-50}" "${PER_CLIENT:-8}" <<'PY'
import atexit, json, os, shutil, statistics, subprocess, sys, threading, time
import dbus, dbus.bus

bin_dir, work, n, reqs, clients, per_client = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:])
started = []
atexit.register(lambda: [p.kill() for p in started if p.poll() is None])
rows = []

def load():
    return open("/proc/loadavg").read().split()[0]

def row(what, med="", mn="", p99="", peer=""):
    rows.append((what, med, mn, p99, load(), peer))
    print(f"  {what}: median {med} min {mn} p99 {p99} load {load()} {peer}", flush=True)

def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]

def ms(x):
    return "%.2f" % x

def status(pid):
    out = {}
    for l in open(f"/proc/{pid}/status"):
        k, _, v = l.partition(":")
        out[k] = (v.split() or [""])[0]
    return out

# -- the store: N jobs (web.sh's shape: queued/finished/failed, handled), 2N messages
root, home = os.path.join(work, "store"), os.path.join(work, "home")
os.makedirs(home)
env = dict(os.environ, AGENT_STORE_ROOT=root, HOME=home, RUST_LOG="warn")
subprocess.run([f"{bin_dir}/orchestrator", "init"], env=env, check=True, stdout=subprocess.DEVNULL)
queue = sorted(os.listdir(os.path.join(root, "Queues")))[0]
os.makedirs(os.path.join(root, "projects", "P"), exist_ok=True)
with open(os.path.join(root, "projects", "P", "project.json"), "w") as f:
    json.dump({"id": "P", "directory": "/tmp", "create_time": "2026-01-01T00:00:00Z",
               "update_time": "2026-01-01T00:00:00Z", "owner": "bench",
               "default_queue": queue}, f)
t0 = time.monotonic()
jobs = os.path.join(root, "Queues", queue, "Jobs")
handled, times = [], []
for i in range(n):
    st = "queued" if i % 50 == 7 else "failed" if i % 10 == 3 else "finished"
    s = i * 8
    q = "2026-%02d-%02dT%02d:%02d:%02dZ" % (1 + s // (28 * 86400) % 12, 1 + s // 86400 % 28,
                                         s // 3600 % 24, s // 60 % 60, s % 60)
    times.append(q)
    rt = {"status": st, "start_time": None, "finish_time": None, "process_id": None,
          "llm_process_id": None, "error": None, "output": None}
    if st != "queued":
        rt.update(start_time=q, finish_time=q, output="Result text for job %d" % i, handled=True)
        handled.append("%s/job-%06d\n" % (queue, i))
    job = {"config": {"project": "P", "working_directory": "/tmp", "queue_time": q,
                      "jobtype": "noop", "claude_command": "research-code",
                      "claude_extra_args": [], "task_description": "Task %d" % i,
                      "supporting_data": {}, "timeout_seconds": 60, "user": "bench"},
           "runtime": rt}
    d = os.path.join(jobs, st + "_jobs")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "job-%06d.json" % i), "w") as f:
        json.dump(job, f)
os.makedirs(os.path.join(root, "logs/handled-jobs"), exist_ok=True)
with open(os.path.join(root, "logs/handled-jobs/generator.log"), "w") as f:
    f.writelines(handled)
pi, po = os.path.join(root, "messaging/processed_inbox"), os.path.join(root, "messaging/processed_outbox")
os.makedirs(pi, exist_ok=True)
os.makedirs(po, exist_ok=True)
for i in range(n):
    cid = "msg-%06d" % i
    req = {"correlation_id": cid, "source": "user", "project": "P", "queue_time": times[i],
           "processed_time": times[i], "command": "list-queues", "content": {},
           "status": "done", "error": None}
    with open(os.path.join(pi, cid + ".json"), "w") as f:
        json.dump(req, f)
    with open(os.path.join(po, cid + ".json"), "w") as f:
        json.dump(dict(req, source="orchestrator", content={"result": [queue]}), f)
# Queue times rise with i: job i is the ith of the listing.
print(f"store: {n} jobs, {2 * n} messages in {time.monotonic() - t0:.0f} s", flush=True)

# -- a private bus any local user may use (like the system bus), orchestratord on it
sockp, conf = os.path.join(work, "bus.sock"), os.path.join(work, "bus.conf")
with open(conf, "w") as f:
    f.write('<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN" '
            '"http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">'
            f'<busconfig><type>custom</type><listen>unix:path={sockp}</listen>'
            '<auth>EXTERNAL</auth><policy context="default"><allow user="*"/>'
            '<allow own="*"/><allow send_destination="*"/><allow receive_sender="*"/>'
            '</policy></busconfig>')
bus = subprocess.Popen(["dbus-daemon", f"--config-file={conf}", "--nofork", "--print-address=1"],
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
started.append(bus)
addr = bus.stdout.readline().strip()
os.chmod(sockp, 0o777)
benv = dict(env, DBUS_SESSION_BUS_ADDRESS=addr)
NAME, PATH = "org.agentstore.Orchestrator1", "/org/agentstore/Orchestrator1"

def start_daemon():
    d = subprocess.Popen([f"{bin_dir}/orchestratord", "--bus", "session", "--idle-exit", "0",
                          "--root", root], env=benv, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    started.append(d)
    while subprocess.run(["busctl", "--address", addr, "status", NAME],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode:
        time.sleep(0.02)
    return d

def connect():
    c = dbus.bus.BusConnection(addr)
    return dbus.Interface(c.get_object(NAME, PATH, introspect=False), NAME), c

def list_jobs(o, filt, offset, limit):
    t0 = time.monotonic()
    page, total, nxt = o.ListJobs(dbus.Dictionary(filt, signature="ss"), dbus.UInt32(offset),
                                  dbus.UInt32(limit), timeout=600)
    return (time.monotonic() - t0) * 1000, str(page), int(total), int(nxt)

d = start_daemon()
o, conn = connect()
took, page, total, _ = list_jobs(o, {}, 0, 50)
assert total == n, (total, n)
row("first listing after start, no index yet (builds it), ms", ms(took))
d.kill(); d.wait()
d = start_daemon()
o, conn = connect()
took, page, total, _ = list_jobs(o, {}, 0, 50)
row("first listing after a restart, index kept, ms", ms(took))
took, page, total, _ = list_jobs(o, {}, n - 50, 50)
row("first deep page (offset N-50) after a restart, ms", ms(took))

def series(f):
    xs = [f() for _ in range(reqs)]
    return ms(statistics.median(xs)), ms(min(xs)), ms(pct(xs, 99))

def ping():
    t0 = time.monotonic()
    conn.call_blocking(NAME, PATH, "org.freedesktop.DBus.Peer", "Ping", "", [])
    return (time.monotonic() - t0) * 1000

floor = series(ping)
row("floor: Peer.Ping on the same connection, ms", *floor)
first = series(lambda: list_jobs(o, {}, 0, 50)[0])
row("ListJobs limit 50 at offset 0 (peer), ms", *first, peer=f"floor p50 {floor[0]}")
for what, off in ((f"offset {n // 2}", n // 2), (f"offset {n - 50}", n - 50)):
    _, page, _, nxt = list_jobs(o, {}, off, 50)
    ids = [j["id"] for j in json.loads(page)]
    assert ids == ["job-%06d" % i for i in range(off, off + 50)], (what, ids[:3])
    s = series(lambda: list_jobs(o, {}, off, 50)[0])
    row(f"ListJobs limit 50 at {what}, ms", *s, peer=f"offset 0 p50 {first[0]}")
mid = n // 2
import calendar
after = "%d.000000000/%s/job-%06d" % (calendar.timegm(time.strptime(times[mid], "%Y-%m-%dT%H:%M:%SZ")),
                                      queue, mid)
try:
    _, page, _, nxt = list_jobs(o, {"after": after}, 0, 50)
    ids = [j["id"] for j in json.loads(page)]
    assert ids == ["job-%06d" % i for i in range(mid + 1, mid + 51)], ids[:3]
    assert nxt == mid + 51, nxt
    s = series(lambda: list_jobs(o, {"after": after}, 0, 50)[0])
    row(f"ListJobs limit 50 after job {mid} (cursor), ms", *s, peer=f"offset 0 p50 {first[0]}")
except dbus.exceptions.DBusException as e:
    row(f"ListJobs after job {mid} (cursor)", "not served by these binaries: " + str(e)[:80])
s = series(lambda: list_jobs(o, {"fields": "summary"}, n - 50, 50)[0])
row(f"ListJobs fields=summary limit 50 at offset {n - 50}, ms", *s)

def busctl(args):
    t0 = time.monotonic()
    subprocess.run(["busctl", "--address", addr, "call", NAME, PATH] + args, env=benv,
                   check=True, stdout=subprocess.DEVNULL)
    return (time.monotonic() - t0) * 1000

bping = series(lambda: busctl(["org.freedesktop.DBus.Peer", "Ping"]))
row("floor: busctl call Peer.Ping (a process per call), ms", *bping)
s = series(lambda: busctl([NAME, "ListJobs", "a{ss}uu", "0", str(n - 50), "50"]))
row(f"busctl call ListJobs offset {n - 50} limit 50, ms", *s, peer=f"busctl Ping p50 {bping[0]}")

def crowd(offsets, what):
    before = int(status(d.pid)["Threads"])
    most = [before]
    lat, errors = [], []
    go = threading.Barrier(clients + 1)
    stop = threading.Event()

    def client(k):
        try:
            o2, _ = connect()
            go.wait()
            for j in range(per_client):
                off = offsets(k, j)
                took, page, _, _ = list_jobs(o2, {}, off, 50)
                lat.append(took)
        except Exception as e:  # noqa: BLE001 — reported below
            errors.append(repr(e))

    def watch():
        while not stop.is_set():
            try:
                most[0] = max(most[0], int(status(d.pid)["Threads"]))
            except OSError:
                pass
            time.sleep(0.01)

    ts = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    w = threading.Thread(target=watch)
    for t in ts:
        t.start()
    w.start()
    go.wait()
    t0 = time.monotonic()
    for t in ts:
        t.join()
    wall = time.monotonic() - t0
    stop.set()
    w.join()
    assert not errors, errors[:3]
    row(f"{clients} clients × {per_client} {what}: requests/s", "%.0f" % (len(lat) / wall))
    row(f"{clients} clients × {per_client} {what}: latency, ms", ms(statistics.median(lat)),
        ms(min(lat)), ms(pct(lat, 99)))
    row(f"{clients} clients × {per_client} {what}: orchestratord threads before / most",
        f"{before} / {most[0]}")

crowd(lambda k, j: 0, "first pages (offset 0)")
crowd(lambda k, j: n - 50 - (k * per_client + j) * 7 % 2000, "deep pages (offsets N-2050..N-50)")
st = status(d.pid)
row("orchestratord VmRSS / VmHWM after the listings (KiB)", f"{st['VmRSS']} / {st['VmHWM']}")

# -- list-messages over 2N messages (Submit), against the first page of ListJobs
def submit(content):
    t0 = time.monotonic()
    o.Submit(json.dumps({"command": "list-messages", "content": content}), timeout=600)
    return (time.monotonic() - t0) * 1000

row("Submit list-messages limit 50, the first after start (builds the message index), ms",
    ms(submit({"limit": 50})))
xs = [submit({"limit": 50}) for _ in range(min(reqs, 10))]
row(f"Submit list-messages limit 50 ({2 * n} messages), ms", ms(statistics.median(xs)),
    ms(min(xs)), ms(max(xs)), peer=f"ListJobs offset 0 p50 {first[0]}")
xs = [submit({"offset": n, "limit": 50}) for _ in range(min(reqs, 10))]
row(f"Submit list-messages offset {n} limit 50, ms", ms(statistics.median(xs)), ms(min(xs)),
    ms(max(xs)))
xs = [submit({"status": "error", "offset": n // 2, "limit": 50}) for _ in range(min(reqs, 10))]
row(f"Submit list-messages status=error offset {n // 2} limit 50 (first counts), ms",
    ms(statistics.median(xs)), ms(min(xs)), ms(max(xs)))
st = status(d.pid)
row("orchestratord VmRSS / VmHWM after list-messages (KiB)", f"{st['VmRSS']} / {st['VmHWM']}")
d.kill(); d.wait()
d = start_daemon()
o, conn = connect()
row("Submit list-messages limit 50, the first after a restart (index kept; counts), ms",
    ms(submit({"limit": 50})))
st = status(d.pid)
row("orchestratord VmRSS / VmHWM after that first list-messages (KiB)",
    f"{st['VmRSS']} / {st['VmHWM']}")

# -- the CLI over D-Bus as a user who cannot read the store, TMPDIR not writable by them
if os.geteuid() == 0 and shutil.which("runuser"):
    subprocess.run([f"{bin_dir}/orchestrator", "add-user", "nob", "--name", "N", "--email",
                    "n@x", "--unix-user", "nobody", "--permissions", "admin"], env=env,
                   check=True, stdout=subprocess.DEVNULL)
    closed = os.path.join(work, "closed-tmp")
    os.makedirs(closed, mode=0o700)
    os.chmod(root, 0o700)
    for command in ("list-jobs", "list-messages"):
        for fmt in ("text", "json"):
            cmd = ["runuser", "-u", "nobody", "--", "env", "HOME=/nonexistent",
                   f"TMPDIR={closed}", "AGENTSTORE_BUS=session",
                   f"DBUS_SESSION_BUS_ADDRESS={addr}", f"{bin_dir}/orchestrator", "--root", root,
                   command, "--format", fmt]
            if command == "list-messages":
                cmd += ["--limit", "50"]
            t0 = time.monotonic()
            r = subprocess.run(cmd, capture_output=True, text=True)
            t = time.monotonic() - t0
            if r.returncode:
                row(f"CLI {command} {fmt} over D-Bus, TMPDIR closed", "failed: " +
                    r.stderr.strip().splitlines()[-1][:100])
            else:
                row(f"CLI {command} {fmt} over D-Bus, TMPDIR closed: s", "%.2f" % t,
                    peer=f"{r.stdout.count(chr(10))} lines")
    os.chmod(root, 0o755)

d.kill(); d.wait()
print()
print(f"== deep pages, {n} jobs, {2 * n} messages; {reqs} requests a row, {clients} clients")
w = max(len(r[0]) for r in rows)
print(f"{'measure':<{w}}  {'median':>9}  {'min':>8}  {'p99/max':>8}  {'load':>5}  peer/floor (same run)")
for what, med, mn, p99, ld, peer in rows:
    print(f"{what:<{w}}  {med:>9}  {mn:>8}  {p99:>8}  {ld:>5}  {peer}")
PY
