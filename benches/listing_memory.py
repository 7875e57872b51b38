#!/usr/bin/env python3
# Benchmark (issue 18): orchestratord memory (VmRSS/VmHWM) around each listing call at N jobs.
#   python3 benches/listing_memory.py BIN_DIR WORK_DIR N STEPS
# e.g. python3 benches/listing_memory.py target/release /tmp/lm 100000 submit,sleep,pages,submit,sleep
# Builds WORK_DIR/store once (N jobs, a quarter per state, one paused queue), runs orchestratord
# on a private dbus-daemon and prints RSS after each step: submit (one-string Submit list-jobs),
# pages (ListJobs, 5000 a page), clitext/clijson (the CLI as nobody over D-Bus), sleep (5 s).
import json, os, subprocess, sys, time
bin_dir = sys.argv[1]; work = sys.argv[2]; n = int(sys.argv[3]); steps = sys.argv[4].split(",")
os.makedirs(work, exist_ok=True)
root = os.path.join(work, "store"); home = os.path.join(work, "home"); os.makedirs(home, exist_ok=True)
env = dict(os.environ, AGENT_STORE_ROOT=root, HOME=home)
if not os.path.exists(root):
    subprocess.run([f"{bin_dir}/orchestrator", "init"], env=env, check=True, stdout=subprocess.DEVNULL)
    subprocess.run([f"{bin_dir}/orchestrator", "add-queue", "poplar"], env=env, check=False, stdout=subprocess.DEVNULL)
    os.makedirs(os.path.join(root, "projects/P"), exist_ok=True)
    json.dump({"id": "P", "directory": "/tmp", "create_time": "2025-01-01T00:00:00Z",
               "update_time": "2025-01-01T00:00:00Z", "owner": "bench", "default_queue": "poplar"},
              open(os.path.join(root, "projects/P/project.json"), "w"))
    d = os.path.join(root, "Queues/poplar/Jobs")
    lines = []
    for i in range(n):
        s = ["queued", "running", "finished", "failed"][i % 4]
        t = "2025-%02d-%02dT%02d:%02d:%02dZ" % (1 + i // 2_000_000 % 12, 1 + i // 86400 % 28, i // 3600 % 24, i // 60 % 60, i % 60)
        doc = {"config": {"project": "P", "working_directory": "/tmp", "queue_time": t, "jobtype": "noop", "claude_command": "noop", "claude_extra_args": [], "task_description": "scale", "supporting_data": {}, "timeout_seconds": 60},
               "runtime": {"status": s, "start_time": None, "finish_time": None, "process_id": None, "llm_process_id": None, "error": None, "output": None, "handled": True}}
        os.makedirs(f"{d}/{s}_jobs", exist_ok=True)
        json.dump(doc, open(f"{d}/{s}_jobs/j{i:06d}.json", "w"))
        if s in ("finished", "failed"): lines.append(f"poplar/j{i:06d}\n")
    qp = os.path.join(root, "Queues/poplar/queue.json"); q = json.load(open(qp)); q["runtime"]["paused"] = True; json.dump(q, open(qp, "w"))
    os.makedirs(os.path.join(root, "logs/handled-jobs"), exist_ok=True)
    open(os.path.join(root, "logs/handled-jobs/generator.log"), "w").writelines(lines)
sockp = os.path.join(work, "bus.sock"); conf = os.path.join(work, "bus.conf")
open(conf, "w").write(f'<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN" "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd"><busconfig><type>custom</type><listen>unix:path={sockp}</listen><auth>EXTERNAL</auth><policy context="default"><allow user="*"/><allow own="*"/><allow send_destination="*"/><allow receive_sender="*"/></policy></busconfig>')
bus = subprocess.Popen(["dbus-daemon", f"--config-file={conf}", "--nofork", "--print-address=1"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
addr = bus.stdout.readline().strip()
benv = dict(env, DBUS_SESSION_BUS_ADDRESS=addr, RUST_LOG="warn", CACHE_DIRECTORY=os.path.join(work, "cache"))
dm = subprocess.Popen([f"{bin_dir}/orchestratord", "--bus", "session", "--idle-exit", "0", "--root", root], env=benv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
while subprocess.run(["busctl", "--address", addr, "status", "org.agentstore.Orchestrator1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode:
    time.sleep(0.05)
def rss():
    o = {}
    for l in open(f"/proc/{dm.pid}/status"):
        k, _, v = l.partition(":")
        if k in ("VmRSS", "VmHWM"): o[k] = int(v.split()[0]) // 1024
    return "RSS %3d HWM %3d" % (o["VmRSS"], o["VmHWM"])
O = ["org.agentstore.Orchestrator1", "/org/agentstore/Orchestrator1", "org.agentstore.Orchestrator1"]
print("load", open("/proc/loadavg").read().split()[0], "start:", rss(), flush=True)
time.sleep(3); print("settled:", rss(), flush=True)
for st in steps:
    t0 = time.monotonic()
    if st == "submit":
        r = subprocess.run(["busctl", "--address", addr, "call"] + O + ["Submit", "s", '{"command": "list-jobs", "content": {}}'], capture_output=True, text=True)
        info = (r.stdout + r.stderr)[:160].strip()
    elif st == "pages":
        off = 0
        while True:
            r = subprocess.run(["busctl", "--address", addr, "--json=short", "call"] + O + ["ListJobs", "a{ss}uu", "0", str(off), "5000"], capture_output=True, text=True, check=True)
            page, total, nxt = json.loads(r.stdout)["data"]
            if nxt >= total or nxt <= off: break
            off = nxt
        info = f"total {total}"
    elif st in ("clitext", "clijson"):
        fmt = st[3:]
        r = subprocess.run(["runuser", "-u", "nobody", "--", "env", "HOME=/nonexistent", "AGENTSTORE_BUS=session", f"DBUS_SESSION_BUS_ADDRESS={addr}", f"{bin_dir}/orchestrator", "--root", root, "list-jobs", "--format", fmt], capture_output=True, text=True)
        info = f"rc {r.returncode} lines {r.stdout.count(chr(10))} {r.stderr[:200]}"
    elif st == "sleep":
        time.sleep(5); info = ""
    print(f"{st}: {time.monotonic()-t0:.2f}s {rss()} {info}", flush=True)
dm.kill(); bus.kill()
