#!/usr/bin/env bash
# Benchmark (issue 33, growth): the same rows at growing history, so a cost that grows with
# the store's past shows as a line in the table.
#   bash benches/growth.sh [SIZES...]      (default: 10000 100000 1000000; builds release)
#   bash benches/growth.sh 2000            (a small size: the whole script in a minute)
#   NO_BUILD=1 BIN=/path/to/bin bash …     (other binaries, e.g. BIN=target/debug)
#   BEFORE=/path/to/bin bash …             (also the first listing of a never-indexed store
#                                           by these binaries, alternating with BIN's, on
#                                           the same store in the same run)
#   ARCHIVE_ABOVE=100000 KEEP_LIVE=10000   (the defaults: at sizes above ARCHIVE_ABOVE all but
#                                           the newest KEEP_LIVE jobs are older than 30 days
#                                           and are moved away by `orchestrator archive
#                                           --older-than 30d`, as an installation that
#                                           archives would have them; at 100,000 and below
#                                           every job stays live)
# For each size N: a store of N finished, handled jobs (written directly: a template per
# file, ~20,000 files/s) plus 1% queued; then each row, with its floor or peer measured in
# the same run beside it and the 1-minute load average when the row was taken:
#   - `orchestrator archive --older-than 30d` (when it applies): time
#   - orchestratord start → end of its first pass (sd_notify STATUS after it); floor: `ls -f`
#     of the finished folder (a process listing it once)
#   - inbox → answer p50 / p99, 100 messages one at a time; floor: a minimal answerer
#     (python, inotify on the inbox, the request copied to the outbox by temp file and
#     rename, no fsync) driven by the same client loop
#   - ListJobs limit 50 over D-Bus: the first after start (no index yet: it builds it), the
#     first after a restart (index kept), and warm (median of 20); floor: `busctl call …
#     Peer.Ping` on the same bus (busctl's own process start and round trip), and for the
#     first listing reading every job file once (`find … -exec cat {} +`)
#   - `orchestrator list-jobs` (text, local CLI): the first with no index (a new cache folder
#     each run; BEFORE's binary beside it, alternating) and warm, time and peak RSS;
#     floors: every job file read once, the folder listed once (`ls -f`)
#   - orchestratord VmRSS and VmHWM after all of it
# Every wait has a deadline: the bench ends, never hangs. Needs python3, dbus-daemon,
# busctl and GNU time. Disk: about 4.5 KiB per job (1M: ~4.5 GB), removed after each size.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${NO_BUILD:-}" ]; then
    cargo build --release --bin orchestratord --bin orchestrator -q
fi
bin=$(realpath "${BIN:-$PWD/target/release}")
before=${BEFORE:+$(realpath "$BEFORE")}
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(10000 100000 1000000)
for b in "$bin" ${before:+"$before"}; do
    for x in orchestrator orchestratord; do
        [ -x "$b/$x" ] || { echo "growth.sh: missing $b/$x" >&2; exit 1; }
    done
done
work=$(mktemp -d /var/tmp/agentstore-growth.XXXXXX)
trap 'rm -rf "$work"' EXIT
results=$work/results.tsv
: >"$results"

python3 - "$bin" "$work" "$results" "${KEEP_LIVE:-10000}" "${ARCHIVE_ABOVE:-100000}" \
    "$before" "${sizes[@]}" <<'PY'
import atexit, datetime, json, os, shutil, socket, statistics, subprocess, sys, time, uuid

bin_dir, work, results = sys.argv[1], sys.argv[2], sys.argv[3]
keep_live, archive_above, before_dir = int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
sizes = [int(s) for s in sys.argv[7:]]
started = []
atexit.register(lambda: [p.kill() for p in started if p.poll() is None])

def load():
    return open("/proc/loadavg").read().split()[0]

def row(n, what, value, floor="-"):
    l = load()
    with open(results, "a") as f:
        f.write(f"{n}\t{what}\t{value}\t{floor}\t{l}\n")
    print(f"  {what}: {value}   [floor/peer: {floor}]  (load {l})", flush=True)

def run(cmd, env=None, limit=1200, **kw):
    return subprocess.run(cmd, env=env, timeout=limit, check=True, **kw)

def secs(cmd, env=None):
    t0 = time.monotonic()
    run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.monotonic() - t0

TEMPLATE = ('{"config": {"project": "P", "working_directory": "/tmp", "queue_time": "%s", '
            '"jobtype": "noop", "claude_command": "noop", "claude_extra_args": [], '
            '"task_description": "bench %d", "supporting_data": {}, "timeout_seconds": 60, '
            '"user": "bench"}, "runtime": {"status": "%s", "start_time": %s, "finish_time": %s, '
            '"process_id": null, "llm_process_id": null, "error": null, "output": %s%s}}')

def build(n):
    root, home = os.path.join(work, f"store-{n}"), os.path.join(work, f"home-{n}")
    os.makedirs(home)
    env = dict(os.environ, AGENT_STORE_ROOT=root, HOME=home, RUST_LOG="warn")
    env.pop("XDG_CACHE_HOME", None)
    env.pop("CACHE_DIRECTORY", None)
    run([f"{bin_dir}/orchestrator", "init"], env=env, stdout=subprocess.DEVNULL)
    os.makedirs(os.path.join(root, "projects/P"), exist_ok=True)
    with open(os.path.join(root, "projects/P/project.json"), "w") as f:
        json.dump({"id": "P", "directory": "/tmp", "create_time": "2025-01-01T00:00:00Z",
                   "update_time": "2025-01-01T00:00:00Z", "owner": "bench",
                   "default_queue": "poplar"}, f)
    jobs = os.path.join(root, "Queues/poplar/Jobs")
    fin, qd = os.path.join(jobs, "finished_jobs"), os.path.join(jobs, "queued_jobs")
    os.makedirs(fin, exist_ok=True)
    os.makedirs(qd, exist_ok=True)
    # Job i ends at now - (n - i) * step: the newest keep_live within the last day, the
    # others (when n > archive_above) spread over the year before the last 31 days.
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    old = max(n - keep_live, 0) if n > archive_above else 0
    handled = []
    for i in range(n):
        if i < old:
            t = now - datetime.timedelta(days=31) - datetime.timedelta(seconds=(old - i) * 30)
        else:
            t = now - datetime.timedelta(seconds=(n - i) * 86400 // max(n - old, 1) + 60)
        ts = t.strftime("%Y-%m-%dT%H:%M:%SZ")
        queued = i % 100 == 42
        if queued:
            body = TEMPLATE % (ts, i, "queued", "null", "null", "null", "")
            path = os.path.join(qd, "job-%07d.json" % i)
        else:
            q = '"%s"' % ts
            body = TEMPLATE % (ts, i, "finished", q, q, '"done"', ', "handled": true')
            path = os.path.join(fin, "job-%07d.json" % i)
            handled.append("poplar/job-%07d\n" % i)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.write(fd, body.encode())
        os.close(fd)
    os.makedirs(os.path.join(root, "logs/handled-jobs"), exist_ok=True)
    with open(os.path.join(root, "logs/handled-jobs/generator.log"), "w") as f:
        f.writelines(handled)
    # The queue is paused: nothing runs the queued jobs.
    qp = os.path.join(root, "Queues/poplar/queue.json")
    q = json.load(open(qp))
    q["runtime"]["paused"] = True
    json.dump(q, open(qp, "w"))
    return root, env, old

def notify_socket():
    path = os.path.join(work, "notify-%s" % uuid.uuid4().hex[:8])
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(path)
    return s, path

def wait_notify(sock, key, limit=1200):
    sock.settimeout(limit)
    while True:
        msg = sock.recv(65536).decode(errors="replace")
        if any(key in l for l in msg.split("\n")):
            return time.monotonic()

def status(pid):
    out = {}
    for l in open(f"/proc/{pid}/status"):
        k, _, v = l.partition(":")
        if k in ("VmRSS", "VmHWM"):
            out[k] = int(v.split()[0]) // 1024
    return out

def timed(cmd, env):
    t0 = time.monotonic()
    r = run(["/usr/bin/time", "-f", "%M"] + cmd, env=env, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True)
    return time.monotonic() - t0, int(r.stderr.strip().splitlines()[-1]) // 1024

def roundtrips(inbox, outbox, tag, count=100, limit=60):
    """inbox → answer latencies (ms, sorted) of `count` messages sent one at a time."""
    lat = []
    for i in range(count):
        cid = "%s-%d" % (tag, i)
        msg = {"correlation_id": cid, "source": "user", "project": None,
               "queue_time": "2026-01-01T10:00:00Z", "processed_time": None,
               "command": "list-queues", "content": {}, "status": "queued", "error": None}
        tmp = os.path.join(inbox, "." + cid + ".tmp")
        with open(tmp, "w") as f:
            json.dump(msg, f)
        t = time.monotonic()
        os.rename(tmp, os.path.join(inbox, cid + ".json"))
        answer = os.path.join(outbox, cid + ".json")
        while not os.path.exists(answer):
            if time.monotonic() - t > limit:
                raise SystemExit(f"growth.sh: no answer to {cid} within {limit} s")
            time.sleep(0.0002)
        lat.append((time.monotonic() - t) * 1000)
    lat.sort()
    return lat

# The floor of a file request and its answer: inotify on the inbox, the request copied to
# the outbox by a temp file and a rename (no parsing, no fsync).
ANSWERER = r"""
import ctypes, os, struct, sys
inbox, outbox = sys.argv[1], sys.argv[2]
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init1(0)
libc.inotify_add_watch(fd, inbox.encode(), 0x80)  # IN_MOVED_TO
open(os.path.join(outbox, ".ready"), "w").close()
while True:
    buf, i = os.read(fd, 65536), 0
    while i < len(buf):
        _, _, _, ln = struct.unpack_from("iIII", buf, i)
        name = buf[i + 16:i + 16 + ln].rstrip(b"\0").decode()
        i += 16 + ln
        if name.endswith(".json"):
            data = open(os.path.join(inbox, name), "rb").read()
            tmp = os.path.join(outbox, "." + name + ".tmp")
            with open(tmp, "wb") as f:
                f.write(data)
            os.rename(tmp, os.path.join(outbox, name))
"""

def answerer_floor():
    d = os.path.join(work, "floor-%s" % uuid.uuid4().hex[:8])
    inbox, outbox = os.path.join(d, "in"), os.path.join(d, "out")
    os.makedirs(inbox)
    os.makedirs(outbox)
    p = subprocess.Popen([sys.executable, "-c", ANSWERER, inbox, outbox])
    started.append(p)
    t0 = time.monotonic()
    while not os.path.exists(os.path.join(outbox, ".ready")):
        if time.monotonic() - t0 > 30 or p.poll() is not None:
            return None
        time.sleep(0.01)
    try:
        return roundtrips(inbox, outbox, "floor")
    finally:
        p.kill()
        p.wait()
        shutil.rmtree(d)

def median_ms(f, times):
    return statistics.median([f() for _ in range(times)])

for n in sizes:
    print(f"== {n} jobs", flush=True)
    t0 = time.monotonic()
    root, env, old = build(n)
    row(n, "store generated (s)", "%.0f" % (time.monotonic() - t0))
    queues = os.path.join(root, "Queues")
    fin = os.path.join(queues, "poplar/Jobs/finished_jobs")
    if old:
        t0 = time.monotonic()
        run([f"{bin_dir}/orchestrator", "archive", "--older-than", "30d"], env=env,
            stdout=subprocess.DEVNULL)
        row(n, "archive --older-than 30d: jobs moved / s",
            "%d / %.1f" % (old, time.monotonic() - t0))
    live = len(os.listdir(fin))
    row(n, "live finished jobs", live)
    ls_folder = secs(["ls", "-f", fin])
    cat_all = secs(["find", queues, "-name", "*.json", "-exec", "cat", "{}", "+"])
    ls_floor = "ls -f %.0f ms" % (ls_folder * 1000)
    cat_floor = "cat every job %.2f s" % cat_all

    # A private bus any local user may use, orchestratord on it.
    sockp, conf = os.path.join(work, "bus.sock"), os.path.join(work, "bus.conf")
    with open(conf, "w") as f:
        f.write('<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN" '
                '"http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">'
                f'<busconfig><type>custom</type><listen>unix:path={sockp}</listen>'
                '<auth>EXTERNAL</auth><policy context="default"><allow user="*"/>'
                '<allow own="*"/><allow send_destination="*"/><allow receive_sender="*"/>'
                '</policy></busconfig>')
    bus = subprocess.Popen(["dbus-daemon", f"--config-file={conf}", "--nofork",
                            "--print-address=1"], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True)
    started.append(bus)
    addr = bus.stdout.readline().strip()
    benv = dict(env, DBUS_SESSION_BUS_ADDRESS=addr)
    NAME, PATH = "org.agentstore.Orchestrator1", "/org/agentstore/Orchestrator1"

    def start(first_pass_row):
        sock, path = notify_socket()
        t0 = time.monotonic()
        d = subprocess.Popen([f"{bin_dir}/orchestratord", "--bus", "session", "--idle-exit",
                              "0", "--root", root], env=dict(benv, NOTIFY_SOCKET=path),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        started.append(d)
        first = wait_notify(sock, "messages answered")
        if first_pass_row:
            row(n, "orchestratord start→first pass (ms)", "%.0f" % ((first - t0) * 1000),
                ls_floor)
        sock.close()
        os.unlink(path)
        t0 = time.monotonic()
        while subprocess.run(["busctl", "--address", addr, "status", NAME],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode:
            if time.monotonic() - t0 > 60:
                raise SystemExit("growth.sh: orchestratord took no bus name within 60 s")
            time.sleep(0.02)
        return d

    def list_page():
        t0 = time.monotonic()
        r = run(["busctl", "--address", addr, "--json=short", "--timeout=1200", "call", NAME,
                 PATH, "org.agentstore.Orchestrator1", "ListJobs", "a{ss}uu", "0", "0", "50"],
                env=benv, capture_output=True, text=True)
        took = (time.monotonic() - t0) * 1000
        page, total, nxt = json.loads(r.stdout)["data"]
        return took, total

    def ping():
        return secs(["busctl", "--address", addr, "call", NAME, PATH,
                     "org.freedesktop.DBus.Peer", "Ping"], env=benv) * 1000

    d = start(True)
    inbox, outbox = os.path.join(root, "messaging/inbox"), os.path.join(root, "messaging/outbox")
    lat = roundtrips(inbox, outbox, "growth-%d" % n)
    fl = answerer_floor()
    row(n, "inbox→answer p50 (ms)", "%.1f" % statistics.median(lat),
        "answerer %.1f ms" % statistics.median(fl) if fl else "answerer failed")
    row(n, "inbox→answer p99 (ms)", "%.1f" % lat[98],
        "answerer %.1f ms" % fl[98] if fl else "answerer failed")
    took, total = list_page()
    pings = median_ms(ping, 5)
    row(n, "ListJobs limit 50, first after start, no index: ms (live jobs)",
        "%.0f (%d)" % (took, total), "%s; Ping %.0f ms" % (cat_floor, pings))
    d.kill(); d.wait()
    d = start(False)
    took, _ = list_page()
    row(n, "ListJobs limit 50, first after a restart, index kept (ms)", "%.0f" % took,
        "Ping %.0f ms" % pings)
    # busctl is a process per call: its own start is in these figures (a few ms), and in
    # the floor's.
    warm = median_ms(lambda: list_page()[0], 20)
    row(n, "ListJobs limit 50 warm, busctl call, median of 20 (ms)", "%.1f" % warm,
        "Ping %.1f ms" % median_ms(ping, 20))
    m = status(d.pid)
    row(n, "orchestratord VmRSS / VmHWM after (MiB)", "%d / %d" % (m["VmRSS"], m["VmHWM"]))
    d.kill(); d.wait(); bus.kill(); bus.wait()

    # The CLI's first listing with no index: a new cache folder each run (the daemon's
    # index above is in HOME's), BEFORE's binary alternating with BIN's.
    def first(b, k):
        cache = os.path.join(work, "cache-%d-%s" % (n, uuid.uuid4().hex[:8]))
        t, m = timed([f"{b}/orchestrator", "list-jobs"], dict(env, XDG_CACHE_HOME=cache))
        shutil.rmtree(cache, ignore_errors=True)
        return t, m
    rounds = 2
    after, prior = [], []
    for k in range(rounds):
        after.append(first(bin_dir, k))
        if before_dir:
            prior.append(first(before_dir, k))
    show = lambda runs: " ".join("%.2f" % t for t, _ in runs) + " / %d" % max(m for _, m in runs)
    row(n, "CLI list-jobs text, first (no index), %d runs (s / peak MiB)" % rounds,
        show(after), cat_floor + ("; BEFORE %s" % show(prior) if prior else ""))
    t, m = timed([f"{bin_dir}/orchestrator", "list-jobs"], env)
    t, m = timed([f"{bin_dir}/orchestrator", "list-jobs"], env)
    row(n, "CLI list-jobs text, warm (s / peak MiB)", "%.2f / %d" % (t, m), ls_floor)
    shutil.rmtree(root)
    shutil.rmtree(env["HOME"])
PY

echo
echo "== growth table (each cell: figure [floor/peer] @ 1-minute load when taken)"
python3 - "$results" "${sizes[@]}" <<'PY'
import sys
rows, sizes, order = {}, sys.argv[2:], []
for l in open(sys.argv[1]):
    n, what, v, floor, load = l.rstrip("\n").split("\t")
    if what not in rows:
        rows[what] = {}
        order.append(what)
    rows[what][n] = v + ("" if floor == "-" else f" [{floor}]") + f" @{load}"
for k in order:
    print(k)
    for s in sizes:
        print(f"    {s:>8}: {rows[k].get(s, '-')}")
PY
