#!/usr/bin/env bash
# Soak test (not CI): `moeserve serve` under a mixed load for a given time,
# a report every interval (requests/s, p50/p99 latency, statuses, RSS) and a
# verdict at the end.
#
#   scripts/soak.sh [--minutes M] [--model DIR] [--moeserve BIN] [--concurrency N]
#                   [--interval S] [--workdir DIR] [-- extra serve arguments]
#
# Defaults: 30 minutes, the embedded default model, build/server/moeserve,
# 8 clients, a line every 60 s, the daemon's log in a temporary folder. The
# mix (seeded, so two runs send the same): completions 30%, chat 25%,
# complete streams 15% (half chat), streams closed by the client after two
# chunks 10%, malformed requests 10% (each must be a 400), structured chat
# (response_format json_schema) 10% (each finished answer must parse and
# hold the schema's keys). Every response is checked: a 5xx, a 429/503, a
# 400 for a good request, a stream without [DONE], a refused connection or
# a timeout is an error. Verdict: PASS when there was no error, the daemon
# is alive, and RSS grew by at most max(16 MiB, 10%) over the second half
# of the run (the first is warm-up: the KV pool's pages, the prefix and
# grammar caches and the step arenas are touched for the first time; on the
# default model the pool alone is 64 MiB); then SIGTERM, which must end it
# with 0. Exit status 0 on PASS.
set -uo pipefail
cd "$(dirname "$0")/.."

minutes=30 model="" bin=build/server/moeserve conc=8 interval=60 work="" extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) minutes="$2"; shift 2 ;;
    --model) model="$2"; shift 2 ;;
    --moeserve) bin="$2"; shift 2 ;;
    --concurrency) conc="$2"; shift 2 ;;
    --interval) interval="$2"; shift 2 ;;
    --workdir) work="$2"; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "soak.sh: unknown argument $1 (--help)" >&2; exit 64 ;;
  esac
done
[ -x "$bin" ] || { echo "soak.sh: $bin is not built (ninja -C build server/moeserve)" >&2; exit 66; }
work="${work:-$(mktemp -d /tmp/moeserve-soak-XXXXXX)}"
mkdir -p "$work"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
args=(serve --host 127.0.0.1 --port "$port")
[ -n "$model" ] && args+=(--model "$model")
"$bin" "${args[@]}" "${extra[@]}" >"$work/serve.log" 2>&1 &
pid=$!
echo "soak.sh: moeserve serve (pid $pid) on port $port, log $work/serve.log; $minutes min, $conc clients"

python3 - "$port" "$pid" "$minutes" "$conc" "$interval" <<'EOF'
import http.client, json, random, sys, threading, time

port, pid, minutes, conc, interval = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])

def rss_mib():
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")

deadline = time.monotonic() + 120
while True:
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        c.request("GET", "/health")
        if c.getresponse().status == 200:
            break
    except OSError:
        pass
    if time.monotonic() > deadline:
        sys.exit("soak.sh: the daemon was not ready within 120 s")
    time.sleep(0.2)
c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
c.request("GET", "/v1/models")
MODEL = json.loads(c.getresponse().read())["data"][0]["id"]

PROMPTS = ["And the LORD said unto Moses", "In the beginning", "Blessed are the meek",
           "And it came to pass in those days", "The LORD is my shepherd"]
QUESTIONS = ["Who is the king of Israel?", "Write a verse about the sea.",
             "Continue: And Jacob went out", "What did Noah build?"]
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
          "age": {"type": "integer", "minimum": 0, "maximum": 999}},
          "required": ["name", "age"], "additionalProperties": False}
BAD = [b'{"prompt": "x", "max_tokens": -1}', b'{"prompt": ', b'{"prompt": 5}',
       b'{"messages": "hi"}', b'{"prompt": "x", "temperature": "hot"}', b'[1, 2]',
       b'{"prompt": "x", "max_tokens": 100000000}']

lock = threading.Lock()
stats = {"lat": [], "status": {}, "errors": {}, "n": 0}
stop = time.monotonic() + minutes * 60

def note(kind, status, lat, error=None):
    with lock:
        stats["n"] += 1
        stats["status"][status] = stats["status"].get(status, 0) + 1
        if lat is not None:
            stats["lat"].append(lat)
        if error:
            key = f"{kind}: {error}"[:120]
            stats["errors"][key] = stats["errors"].get(key, 0) + 1

def post(path, body, raw=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    c.request("POST", path, body=raw if raw is not None else json.dumps(body),
              headers={"Content-Type": "application/json"})
    return c, c.getresponse()

def one(rng):
    r = rng.random()
    t = time.monotonic()
    if r < 0.30:
        kind, path, body = "completion", "/v1/completions", {"prompt": rng.choice(PROMPTS), "max_tokens": rng.randint(8, 64), "temperature": 0.7}
    elif r < 0.55:
        kind, path, body = "chat", "/v1/chat/completions", {"messages": [{"role": "user", "content": rng.choice(QUESTIONS)}], "max_tokens": rng.randint(16, 96), "temperature": 0.7}
    elif r < 0.80:
        chat = rng.random() < 0.5
        kind = "stream-cancel" if r >= 0.70 else "stream"
        path = "/v1/chat/completions" if chat else "/v1/completions"
        body = ({"messages": [{"role": "user", "content": rng.choice(QUESTIONS)}]} if chat else {"prompt": rng.choice(PROMPTS)})
        body.update({"max_tokens": rng.randint(16, 96), "stream": True, "temperature": 0.7})
        c, resp = post(path, body)
        if resp.status != 200:
            resp.read(); c.close()
            return note(kind, resp.status, None, f"status {resp.status}")
        chunks, done = 0, False
        while True:
            line = resp.readline()
            if not line:
                break
            if line.startswith(b"data: "):
                chunks += 1
                if line.strip() == b"data: [DONE]":
                    done = True
                    break
                if kind == "stream-cancel" and chunks >= 2:
                    break
        c.close()
        if kind == "stream-cancel":
            return note(kind, "cancelled", None)
        return note(kind, 200, time.monotonic() - t, None if done else "no [DONE]")
    elif r < 0.90:
        raw = rng.choice(BAD)
        c, resp = post("/v1/completions", None, raw)
        resp.read(); c.close()
        return note("bad", f"{resp.status} (bad)", None, None if resp.status == 400 else f"status {resp.status}")
    else:
        kind, path = "structured", "/v1/chat/completions"
        body = {"messages": [{"role": "user", "content": "Give a name and an age as JSON."}], "max_tokens": 160, "temperature": 0.7,
                "response_format": {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA, "strict": True}}}
    c, resp = post(path, body)
    data = resp.read()
    c.close()
    lat = time.monotonic() - t
    if resp.status != 200:
        return note(kind, resp.status, lat, f"status {resp.status}: {data[:80]!r}")
    j = json.loads(data)
    err = None
    if kind == "structured" and j["choices"][0]["finish_reason"] == "stop":
        try:
            v = json.loads(j["choices"][0]["message"]["content"])
            if set(v) != {"name", "age"}:
                err = f"keys {sorted(v)}"
        except (ValueError, TypeError) as e:
            err = f"not JSON: {e}"
    note(kind, 200, lat, err)

def client(k):
    rng = random.Random(1000 + k)
    while time.monotonic() < stop:
        try:
            one(rng)
        except Exception as e:  # noqa: BLE001  (a refused connection, a timeout: an error)
            note("client", type(e).__name__, None, f"{type(e).__name__}: {e}")

def pct(xs, p):
    return xs[min(len(xs) - 1, int(p * len(xs)))] * 1000 if xs else float("nan")

threads = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(conc)]
for th in threads:
    th.start()
t0 = last = time.monotonic()
rss0 = rss_mib()
first_rss = None
total = {"n": 0, "status": {}, "errors": {}}
while True:
    left = stop - time.monotonic()
    if left > 0:
        time.sleep(min(interval, left))
    else:
        for th in threads:  # the last requests finish (each has a 120-s timeout)
            th.join(150)
    with lock:
        snap, stats = stats, {"lat": [], "status": {}, "errors": {}, "n": 0}
    now = time.monotonic()
    rss = rss_mib()
    if first_rss is None and now - t0 >= (stop - t0) / 2:
        first_rss = rss  # the first report of the second half
    lat = sorted(snap["lat"])
    total["n"] += snap["n"]
    for d_ in ("status", "errors"):
        for k, v in snap[d_].items():
            total[d_][k] = total[d_].get(k, 0) + v
    st = " ".join(f"{k}:{v}" for k, v in sorted(snap["status"].items(), key=str))
    print(f"[{(now - t0) / 60:6.1f} min] {snap['n'] / max(now - last, 1e-3):7.1f} req/s  p50 {pct(lat, 0.5):7.0f} ms"
          f"  p99 {pct(lat, 0.99):7.0f} ms  RSS {rss:7.1f} MiB  errors {sum(snap['errors'].values())}  [{st}]",
          flush=True)
    for k, v in snap["errors"].items():
        print(f"      error x{v}: {k}", flush=True)
    last = now
    if left <= 0:
        break
rss1 = rss_mib()
growth = rss1 - first_rss
allowed = max(16.0, 0.10 * first_rss)
n_err = sum(total["errors"].values())
ok = n_err == 0 and growth <= allowed
print(f"soak: {total['n']} requests in {(time.monotonic() - t0) / 60:.1f} min; statuses "
      + " ".join(f"{k}:{v}" for k, v in sorted(total["status"].items(), key=str)))
print(f"soak: RSS {rss0:.1f} MiB at start, {first_rss:.1f} at half time, {rss1:.1f} at the end "
      f"({growth:+.1f} MiB over the second half; allowed {allowed:.1f}); {n_err} errors")
for k, v in sorted(total["errors"].items()):
    print(f"      error x{v}: {k}")
print(f"soak: {'PASS' if ok else 'FAIL'}")
sys.exit(0 if ok else 1)
EOF
load=$?
alive=1
kill -0 "$pid" 2>/dev/null || alive=0
kill -TERM "$pid" 2>/dev/null
wait "$pid"
rc=$?
echo "soak.sh: daemon $( [ $alive = 1 ] && echo 'alive at the end' || echo 'DEAD before the end'), exit $rc after SIGTERM"
[ $load = 0 ] && [ $alive = 1 ] && [ $rc = 0 ] && { echo "soak.sh: PASS"; exit 0; }
echo "soak.sh: FAIL (log: $work/serve.log)"
exit 1
