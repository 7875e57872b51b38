#!/bin/sh
# CPU per `agentshell exec` call against a local plain-http fake model server (issue 18:
# TLS roots must load only for https endpoints). Usage:
#   benches/agentshell_exec_cpu.sh [path/to/agentshell] [calls]
# Prints user+sys CPU per call (ms, getrusage of the children), averaged over the calls.
set -eu
BIN=$(realpath "${1:-target/release/agentshell}")
N=${2:-20}
TMP=$(mktemp -d)
trap 'kill $SERVER 2>/dev/null || true; rm -rf "$TMP"' EXIT
cat > "$TMP/server.py" <<'PY'
import http.server, json, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        chunks = [
            {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "hi"}, "finish_reason": None}]},
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
            {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1}},
        ]
        body = "".join("data: %s\n\n" % json.dumps(c) for c in chunks) + "data: [DONE]\n\n"
        body = body.encode()
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(body)))
        self.send_header("connection", "close")
        self.end_headers()
        self.wfile.write(body)
s = http.server.HTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
PY
python3 "$TMP/server.py" > "$TMP/port" &
SERVER=$!
while [ ! -s "$TMP/port" ]; do sleep 0.05; done
PORT=$(cat "$TMP/port")
mkdir -p "$TMP/home" "$TMP/proj/.agentshell"
python3 - "$BIN" "$N" "$PORT" "$TMP" <<'PY'
import os, resource, subprocess, sys
binary, n, port, tmp = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
env = {"PATH": os.environ["PATH"], "HOME": tmp + "/home", "AGENTSHELL_MODEL": "openai/m",
       "AGENTSHELL_BASE_URL": "http://127.0.0.1:%s/v1" % port, "OPENAI_API_KEY": "sk-bench"}
def cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime
subprocess.run([binary, "exec", "--json", "hi"], cwd=tmp + "/proj", env=env, check=True,
               stdout=subprocess.DEVNULL)  # warm the page cache
before = cpu()
for _ in range(n):
    subprocess.run([binary, "exec", "--json", "hi"], cwd=tmp + "/proj", env=env, check=True,
                   stdout=subprocess.DEVNULL)
per_call = (cpu() - before) / n * 1000
print("agentshell exec over http: %.1f ms CPU per call (user+sys, mean of %d, %s)" % (per_call, n, binary))
PY
