#!/usr/bin/env bash
# Benchmark (issue 33, backlog): orchestratord started on a store with N finished jobs it has
# not handled yet (a machine back after a long time offline, a synced folder delivering a
# batch, a store from before the handled-log).
#   bash benches/backlog.sh [N]          (default 100000)
#   NO_BUILD=1 bash benches/backlog.sh   (use target/release as it is)
#   NO_BUILD=1 BIN=DIR bash …            (the binaries in DIR, e.g. target/debug)
#   BEFORE_BIN=DIR bash benches/backlog.sh   (also run an older orchestratord from DIR)
# Measures, in the same run:
#   - the backlog: start → every job handled (its handled-log line written), jobs/s;
#     goal ≥ 5,000 jobs/s
#   - inbox → answer while the backlog is handled: one message at a time from READY until
#     the backlog is done, p50/p99/max and how many; goal p99 ≤ 30 ms
#   - the same inbox → answer once the backlog is done (the floor: no backlog)
#   - peer/floor for the backlog: a minimal program (python) doing the same file work per
#     job (read, set the flag, write a temp file, rename) with ONE sync at the end: what
#     the grouped writes cost without anything else the daemon does
#   - the load average beside each row (the machine may be shared)
# Every wait has a deadline: the bench ends, never hangs.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-100000}
if [ -z "${NO_BUILD:-}" ]; then cargo build --release --bins -q; fi
bin=$(realpath "${BIN:-$PWD/target/release}")
work=$(mktemp -d /tmp/agentstore-backlog.XXXXXX)
trap 'rm -rf "$work"' EXIT
python3 - "$bin" "$work" "$N" "${BEFORE_BIN:-}" <<'PY'
import atexit, json, os, socket, statistics, subprocess, sys, time, uuid

bin_dir, work, n, before_bin = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
started = []
atexit.register(lambda: [p.kill() for p in started if p.poll() is None])

def load():
    return open("/proc/loadavg").read().split()[0]

def row(what, value):
    print(f"  {what:<58} {value:>12}   load {load()}", flush=True)

def job(i):
    return {"config": {"project": "P", "working_directory": "/tmp",
                       "queue_time": "2025-10-25T10:00:00Z", "jobtype": "noop",
                       "claude_command": "noop", "claude_extra_args": [],
                       "task_description": "bench", "supporting_data": {},
                       "timeout_seconds": 60},
            "runtime": {"status": "finished", "start_time": None, "finish_time": None,
                        "process_id": None, "llm_process_id": None, "error": None,
                        "output": "output %d" % i}}

def build(tag):
    root = os.path.join(work, "store-" + tag)
    home = os.path.join(work, "home")
    os.makedirs(home, exist_ok=True)
    env = dict(os.environ, AGENT_STORE_ROOT=root, HOME=home)
    subprocess.run([f"{bin_dir}/orchestrator", "init"], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    os.makedirs(os.path.join(root, "projects/P"), exist_ok=True)
    with open(os.path.join(root, "projects/P/project.json"), "w") as f:
        json.dump({"id": "P", "directory": "/tmp", "create_time": "2025-01-01T00:00:00Z",
                   "update_time": "2025-01-01T00:00:00Z", "owner": "bench",
                   "default_queue": "poplar"}, f)
    fin = os.path.join(root, "Queues/poplar/Jobs/finished_jobs")
    os.makedirs(fin, exist_ok=True)
    for i in range(n):
        with open(os.path.join(fin, "b-%06d.json" % i), "w") as f:
            json.dump(job(i), f)
    subprocess.run(["sync"])
    return root, env

# Each handled-log line is "poplar/b-NNNNNN\n": 16 bytes, so its size counts the jobs.
LINE = len("poplar/b-000000\n")
def handled(root):
    d = os.path.join(root, "logs/handled-jobs")
    try:
        return sum(os.stat(os.path.join(d, f)).st_size for f in os.listdir(d)) // LINE
    except FileNotFoundError:
        return 0

def notify_socket():
    path = os.path.join(work, "notify-%s" % uuid.uuid4().hex[:8])
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(path)
    return s, path

def ask(root, cid, limit=120):
    """Writes one list-queues message; returns ms until its answer is in the outbox."""
    inbox, outbox = os.path.join(root, "messaging/inbox"), os.path.join(root, "messaging/outbox")
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
        if time.monotonic() - t > limit:
            raise SystemExit(f"no answer to {cid} within {limit} s")
        time.sleep(0.0002)
    return (time.monotonic() - t) * 1000

def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p / 100))]

def run(label, daemon_bin):
    root, env = build(label)
    sock, path = notify_socket()
    t0 = time.monotonic()
    d = subprocess.Popen([f"{daemon_bin}/orchestratord", "--bus", "none", "--idle-exit", "0",
                          "--root", root], env=dict(env, NOTIFY_SOCKET=path, RUST_LOG="error"),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    started.append(d)
    sock.settimeout(120)
    while b"READY=1" not in sock.recv(65536):
        pass
    sock.close(); os.unlink(path)
    during, i = [], 0
    deadline = t0 + max(600, n / 50)
    first = None
    while True:
        h = handled(root)
        if first is None and h > 0:
            first = time.monotonic()
        if h >= n:
            break
        if time.monotonic() > deadline:
            raise SystemExit(f"{label}: backlog not done after {deadline - t0:.0f} s ({h} of {n})")
        ms = ask(root, "during-%d" % i)
        i += 1
        if handled(root) < n:  # answered while the backlog was still being handled
            during.append(ms)
    done = time.monotonic()
    print(f"== {label}: {n} unhandled finished jobs", flush=True)
    row("backlog: start → all handled (s)", "%.2f" % (done - t0))
    row("backlog: jobs/s (start → all handled)", "%.0f" % (n / (done - t0)))
    if during:
        row(f"inbox→answer DURING the backlog p50 (ms, {len(during)} msgs)", "%.1f" % statistics.median(during))
        row("inbox→answer DURING the backlog p99 (ms)", "%.1f" % pct(during, 99))
        row("inbox→answer DURING the backlog max (ms)", "%.1f" % max(during))
    else:
        row("inbox→answer DURING the backlog", "none answered before the end")
    after = [ask(root, "after-%d" % k) for k in range(100)]
    row("floor: inbox→answer with no backlog p50 (ms)", "%.1f" % statistics.median(after))
    row("floor: inbox→answer with no backlog p99 (ms)", "%.1f" % pct(after, 99))
    d.kill(); d.wait()
    return root

def floor(root):
    """The per-job file work alone (read, flag, temp file, rename), one sync at the end."""
    fin = os.path.join(root, "Queues/poplar/Jobs/finished_jobs")
    names = [e for e in os.listdir(fin) if e.endswith(".json")]
    t0 = time.monotonic()
    for name in names:
        p = os.path.join(fin, name)
        with open(p) as f:
            j = json.load(f)
        j["runtime"]["handled"] = "floor"
        tmp = os.path.join(fin, "." + name + ".tmp")
        with open(tmp, "w") as f:
            json.dump(j, f, indent=2)
        os.rename(tmp, p)
    os.sync()
    dt = time.monotonic() - t0
    row("peer floor: python read+flag+temp+rename, 1 sync (jobs/s)", "%.0f" % (len(names) / dt))

root = run("this build", bin_dir)
floor(root)
if before_bin:
    run("before (BEFORE_BIN)", before_bin)
PY
