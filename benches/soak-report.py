#!/usr/bin/env python3
"""benches/soak-report.py — one sample of the system soak (benches/soak-system.sh), run INSIDE
the soak container as root. Prints one JSON object:

  messages: written (the writers' ledger), answered (one answer file per id, in either
            copy's outbox/processed_outbox), lost (written more than --grace s ago and not
            answered), doubled (ids with more than one message_answered event, or more than
            one answer file), dbus_ok / dbus_failed (the D-Bus caller's ledger);
  jobs:     finished, failed (by error, first words), run_twice (job ids with more than one
            job_started event), stuck (running longer than their timeout + --grace, queued longer than an hour + --grace);
  approvals: requested, allowed, denied (approval_requested / approval_answered events),
            answered_twice (requests with more than one answer event: must be 0), and the
            approver script's answers (approvals-<side>.log);
  conflicts: Syncthing conflict copies anywhere in either copy, and files set aside in
            conflicts/;
  daemons:  per daemon (unit name): pid, rss_kb, fds, threads, inotify watches;
  load:     /proc/loadavg (the container shares the host's).

Usage: soak-report.py --copy /var/lib/agentstore --copy /srv/beta --ledger /var/tmp/soak
                      --grace 600 --unit NAME...
       soak-report.py --daemons-only --unit NAME...   (only the daemons' figures)
       soak-report.py --summarize samples.jsonl       (on the host, after the run: per daemon
                      the first, highest and last RSS/fds/threads/inotify; the RESULT line,
                      exit 0 only with 0 lost, doubled, unrecorded, run twice and stuck)

Messages are the writers' (written-<side>.log) and the D-Bus Submits that succeeded
(written-dbus-<side>.log); dbus_failed counts the Submits that did not. A Submit's answer is
its D-Bus reply (no outbox file): answered when the call succeeded, unrecorded without its
message_answered event.
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter


def read_json(path):
    try:
        with open(path, "rb") as f:
            return json.loads(f.read())
    except (OSError, ValueError):
        return None


def listdir(d):
    try:
        return os.listdir(d)
    except OSError:
        return []


TORN = []


def events(copy):
    """Every event line of the copy's event logs; lines that are no JSON (a write torn by a
    full disk, with the next event glued to it) are counted in TORN."""
    out = []
    for path in glob.glob(os.path.join(copy, "logs", "events-*.jsonl")):
        if "sync-conflict" in path:
            continue
        try:
            with open(path, errors="replace") as f:
                for line in f:
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        TORN.append(f"{os.path.basename(path)}: {line[:120]}")
        except OSError:
            pass
    return out


def ledger(path):
    """Lines 'ID EPOCH' (written) of the writers."""
    seen = {}
    for p in glob.glob(path):
        with open(p) as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 2:
                    seen[parts[0]] = float(parts[1])
    return seen


def proc_stats(pid):
    s = {"pid": pid}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    s["rss_kb"] = int(line.split()[1])
                elif line.startswith("Threads:"):
                    s["threads"] = int(line.split()[1])
        fds = os.listdir(f"/proc/{pid}/fd")
        s["fds"] = len(fds)
        watches = 0
        for fd in fds:
            try:
                with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                    watches += sum(1 for l in f if l.startswith("inotify wd:"))
            except OSError:
                pass
        s["inotify_watches"] = watches
    except OSError:
        pass
    return s


def main_pid(unit):
    try:
        out = subprocess.run(["systemctl", "show", "-p", "MainPID", "--value", unit],
                             capture_output=True, text=True, timeout=20).stdout.strip()
        return int(out or 0)
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--copy", action="append", default=[])
    ap.add_argument("--ledger")
    ap.add_argument("--grace", type=float, default=600)
    ap.add_argument("--unit", action="append", default=[])
    ap.add_argument("--daemons-only", action="store_true")
    ap.add_argument("--summarize")
    a = ap.parse_args()
    if a.summarize:
        return summarize(a.summarize)
    if a.daemons_only:
        print(json.dumps({"daemons": {u: proc_stats(main_pid(u)) for u in a.unit}}, sort_keys=True))
        return 0
    if not a.copy or not a.ledger:
        ap.error("--copy and --ledger are needed (or --daemons-only, --summarize)")
    now = time.time()

    written = ledger(os.path.join(a.ledger, "written-*.log"))
    answer_files = Counter()
    for copy in a.copy[:1]:  # the first copy is the reference (the others converge to it)
        for d in ("messaging/outbox", "messaging/processed_outbox"):
            for n in listdir(os.path.join(copy, d)):
                if n.endswith(".json") and not n.startswith(".") and "sync-conflict" not in n:
                    answer_files[n[:-5]] += 1
    ev = events(a.copy[0])
    answered_events = Counter(e.get("correlation_id") for e in ev if e.get("event") == "message_answered")
    started = Counter(e.get("job_id") for e in ev if e.get("event") == "job_started")
    # A D-Bus Submit is answered in its reply, not in the outbox: one in the ledger was
    # answered (the call returned the answer); its record is the message_answered event.
    def is_answered(i):
        if i.startswith("soak-dbus-"):
            return True
        return answer_files.get(i, 0) >= 1

    answered = [i for i in written if is_answered(i)]
    lost = [i for i, t in written.items() if not is_answered(i) and now - t > a.grace]
    doubled = sorted({i for i in written if answer_files.get(i, 0) > 1 or answered_events.get(i, 0) > 1})
    unrecorded = sorted(i for i in answered if answered_events.get(i, 0) == 0)
    dbus = ledger(os.path.join(a.ledger, "written-dbus-*.log"))
    dbus_failed = ledger(os.path.join(a.ledger, "dbus-failed-*.log"))

    jobs = {"finished": 0, "failed": Counter(), "stuck": [], "queued": 0, "running": 0}
    copy = a.copy[0]
    for qdir in glob.glob(os.path.join(copy, "Queues", "*", "Jobs")):
        for state in ("queued", "running", "finished", "failed"):
            for n in listdir(os.path.join(qdir, f"{state}_jobs")):
                if not n.endswith(".json") or n.startswith(".") or "sync-conflict" in n:
                    continue
                if state == "finished":
                    jobs["finished"] += 1
                    continue
                doc = read_json(os.path.join(qdir, f"{state}_jobs", n)) or {}
                if state == "failed":
                    err = str((doc.get("runtime") or {}).get("error") or "?")
                    reason = re.sub(r"[0-9a-f-]{8,}|\d+", "N", " ".join(err.split()[:6]))
                    jobs["failed"][reason] += 1
                    continue
                jobs[state] += 1
                try:
                    age = now - os.stat(os.path.join(qdir, f"{state}_jobs", n)).st_mtime
                except OSError:
                    continue
                # timeout_seconds bounds the run, not the wait in the queue: a queued job is
                # stuck after an hour (+ grace) in the queue, a running one after its timeout.
                limit = 3600.0
                if state == "running":
                    limit = float((doc.get("config") or {}).get("timeout_seconds") or 3600)
                if age > limit + a.grace:
                    jobs["stuck"].append(n[:-5])
    run_twice = sorted(j for j, c in started.items() if c > 1)
    # Approvals: asked (approval_requested), settled allowed / denied (approval_answered: a
    # person's answer, a rule or the deadline), answered twice (must stay 0), and the
    # approver script's answers (approvals-<side>.log: JOB REQUEST approve|deny EPOCH).
    asked = {e.get("job_id") for e in ev if e.get("event") == "approval_requested"}
    settled = Counter()
    verdicts = Counter()
    for e in ev:
        if e.get("event") == "approval_answered":
            verdict, _, req = str(e.get("detail") or "").partition(" ")
            settled[req] += 1
            verdicts[verdict] += 1
    by_script = Counter()
    for p in glob.glob(os.path.join(a.ledger, "approvals-*.log")):
        with open(p) as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3:
                    by_script[parts[2]] += 1

    conflicts = []
    for c in a.copy:
        for root, _dirs, files in os.walk(c):
            if "/.stversions" in root or "/.stfolder" in root:
                continue
            for n in files:
                if "sync-conflict" in n:
                    conflicts.append(os.path.join(root, n))
    set_aside = sum(len(files) for c in a.copy[:1] for _r, _d, files in os.walk(os.path.join(c, "conflicts")))

    daemons = {u: proc_stats(main_pid(u)) for u in a.unit}
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    print(json.dumps({
        "time": int(now),
        "messages": {"written": len(written), "answered": len(answered), "lost": len(lost),
                     "lost_ids": lost[:10], "doubled": len(doubled), "doubled_ids": doubled[:10],
                     "answered_without_event": len(unrecorded), "unrecorded_ids": unrecorded[:10],
                     "torn_event_lines": len(TORN), "torn_examples": TORN[:3],
                     "dbus_ok": len(dbus), "dbus_failed": len(dbus_failed)},
        "jobs": {"finished": jobs["finished"], "failed": dict(jobs["failed"]),
                 "queued": jobs["queued"], "running": jobs["running"],
                 "run_twice": len(run_twice), "run_twice_ids": run_twice[:10],
                 "stuck": len(jobs["stuck"]), "stuck_ids": jobs["stuck"][:10]},
        "approvals": {"requested": sum(1 for e in ev if e.get("event") == "approval_requested"),
                      "jobs_asking": len(asked), "allowed": verdicts["allowed"],
                      "denied": verdicts["denied"],
                      "answered_twice": sum(1 for c in settled.values() if c > 1),
                      "script_approved": by_script["approve"], "script_denied": by_script["deny"]},
        "conflicts": {"sync_conflict_copies": len(conflicts), "examples": conflicts[:5],
                      "set_aside": set_aside},
        "daemons": daemons,
        "load": load,
    }, sort_keys=True))


def summarize(path):
    samples = []
    with open(path) as f:
        for line in f:
            try:
                samples.append(json.loads(line))
            except ValueError:
                pass
    if not samples:
        print("RESULT: FAIL (no samples)")
        return 1
    first, last = samples[0], samples[-1]
    hours = (last["time"] - first["time"]) / 3600
    print(f"{len(samples)} samples over {hours:.2f} h; load first {' '.join(first['load'])}, "
          f"highest 1-min {max(float(s['load'][0]) for s in samples):.2f}, last {' '.join(last['load'])}")
    print("resources per daemon (first / highest / last sample; pid changes after each kill -9 or reboot):")
    names = sorted({u for s in samples for u in s.get("daemons", {})})
    for u in names:
        row = []
        for key in ("rss_kb", "fds", "threads", "inotify_watches"):
            vals = [s["daemons"][u].get(key) for s in samples if u in s.get("daemons", {}) and s["daemons"][u].get(key) is not None]
            if vals:
                row.append(f"{key} {vals[0]}/{max(vals)}/{vals[-1]}")
        pids = {s["daemons"][u].get("pid") for s in samples if u in s.get("daemons", {})}
        print(f"  {u}: {', '.join(row) or 'no figures'} ({len(pids)} pids)")
    m, jb, c = last["messages"], last["jobs"], last["conflicts"]
    print(f"messages: written {m['written']} answered {m['answered']} lost {m['lost']} doubled {m['doubled']} "
          f"unrecorded {m['answered_without_event']}; D-Bus Submits ok {m['dbus_ok']} failed {m['dbus_failed']}")
    print(f"jobs: finished {jb['finished']} failed {sum(jb['failed'].values())} running {jb['running']} "
          f"queued {jb['queued']} run twice {jb['run_twice']} stuck {jb['stuck']}")
    ap = last.get("approvals") or {}
    if ap:
        print(f"approvals: requested {ap['requested']} (by {ap['jobs_asking']} jobs), allowed {ap['allowed']} "
              f"denied {ap['denied']} (the deadline's denials included), answered twice {ap['answered_twice']}; "
              f"the approver script approved {ap['script_approved']} and denied {ap['script_denied']}")
    for reason, n in sorted(jb["failed"].items(), key=lambda kv: -kv[1]):
        print(f"  failed {n}: {reason}")
    print(f"conflict copies {c['sync_conflict_copies']} {c['examples']}, set aside {c['set_aside']}")
    for key in ("lost_ids", "doubled_ids", "unrecorded_ids"):
        if m.get(key):
            print(f"{key}: {m[key]}")
    for key in ("run_twice_ids", "stuck_ids"):
        if jb.get(key):
            print(f"{key}: {jb[key]}")
    twice = ap.get("answered_twice", 0)
    bad = m["lost"] + m["doubled"] + m["answered_without_event"] + jb["run_twice"] + jb["stuck"] + twice
    print("RESULT:", "PASS" if bad == 0 else "FAIL", json.dumps({
        "lost": m["lost"], "doubled": m["doubled"], "unrecorded": m["answered_without_event"],
        "run_twice": jb["run_twice"], "stuck": jb["stuck"], "approvals_answered_twice": twice}))
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
