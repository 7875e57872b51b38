#!/usr/bin/env bash
# Benchmark (issue 2): a store with 10,000 jobs, each with 100 KB of output; times
# `orchestrator list-jobs` (text and --format json) and reports peak RSS.
#   bash benches/list_jobs.sh [N_JOBS] [OUTPUT_BYTES]
#   NO_BUILD=1 bash …                    (target/release as it is)
#   NO_BUILD=1 BIN=DIR bash …            (the binaries in DIR, e.g. target/debug)
# Needs GNU time (/usr/bin/time; apt-get install time) and hyperfine if present.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-10000}
size=${2:-102400}
[ -n "${NO_BUILD:-}" ] || cargo build --release --bin orchestrator -q
bin=$(realpath "${BIN:-$PWD/target/release}")/orchestrator
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export AGENT_STORE_ROOT=$work/store HOME=$work/home
mkdir -p "$HOME"
"$bin" init >/dev/null
python3 - "$AGENT_STORE_ROOT" "$n" "$size" <<'PY'
import json, sys, os
root, n, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
out = "x" * size
for i in range(n):
    status = ["queued", "running", "finished", "failed"][i % 4]
    job = {"config": {"project": "P", "working_directory": "/tmp",
                      "queue_time": "2025-10-25T%02d:%02d:%02dZ" % (i // 3600 % 24, i // 60 % 60, i % 60),
                      "jobtype": "noop", "claude_command": "noop", "claude_extra_args": [],
                      "task_description": "bench", "supporting_data": {}, "timeout_seconds": 60},
           "runtime": {"status": status, "start_time": None, "finish_time": None, "process_id": None,
                       "llm_process_id": None, "error": None, "output": out}}
    d = os.path.join(root, "Queues/poplar/Jobs", status + "_jobs")
    with open(os.path.join(d, "job-%05d.json" % i), "w") as f:
        json.dump(job, f)
PY
echo "store: $n jobs × $size B output = $(du -sh "$AGENT_STORE_ROOT/Queues" | cut -f1)"
peak() { /usr/bin/time -f '%M' "$@" 2>&1 >/dev/null | tail -1; }
for fmt in text json; do
    "$bin" list-jobs --format "$fmt" >/dev/null   # warm the page cache
    if command -v hyperfine >/dev/null; then
        hyperfine -w 1 -r 5 -N "$bin list-jobs --format $fmt" 2>/dev/null | grep -E 'Time|Range'
    else
        s=$(date +%s.%N); "$bin" list-jobs --format "$fmt" >/dev/null; e=$(date +%s.%N)
        echo "list-jobs --format $fmt: $(echo "$e - $s" | bc) s"
    fi
    echo "list-jobs --format $fmt: peak RSS $(peak "$bin" list-jobs --format "$fmt") KiB"
done
