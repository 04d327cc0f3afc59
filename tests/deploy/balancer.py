#!/usr/bin/python3
"""Three `moeserve serve` replicas behind a real HAProxy (Debian's 2.6;
scripts/install-deps.sh installs it), configured by deploy/haproxy.cfg
with its ports and servers replaced, under a steady mixed load.

    /usr/bin/python3 tests/deploy/balancer.py --moeserve BIN --model DIR --haproxy-cfg deploy/haproxy.cfg [--workdir DIR]

--model is a chat-capable checkpoint (the random one). Six clients send
completions, chats, chat streams, Responses and Responses streams (a few
tokens each) the whole time, while:
  1. before: the load alone;
  2. rolling restart: each replica in turn gets SIGTERM, exits, and a new
     one starts on its port;
  3. after: the load alone;
  4. kill: one replica gets SIGKILL, and is started again later.
Must hold: no request fails from the start to the SIGKILL (the draining
replicas' 503s are retried elsewhere by HAProxy, counted); after the
SIGKILL at most the requests in flight fail, each within a bound, and
HAProxy sends the killed replica nothing once its health check has seen
it down. Prefix affinity: twelve two-turn conversations keyed by
X-Session-Id through the example's hashing get their second turn's prompt
from the prefix cache (cached tokens >= 90% of the first turn's prompt),
against round robin in the same run. The figures (requests, failures,
retries, p50/p99 per phase, cached shares) are printed.

Exits 77 when haproxy is not installed.
"""
import argparse
import http.client
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

INTER_S = 0.5          # the example's health-check interval (fall 1)
HIT = 0.9              # a follow-up's least cached share of its first turn


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def healthy(port):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        c.request("GET", "/health")
        return c.getresponse().status == 200
    except OSError:
        return False


class Replica:
    def __init__(self, binary, model, port, agent, work, name):
        self.argv = [binary, "serve", "--model", model, "--port", str(port), "--threads", "1",
                     "--served-model-name", "m", "--ctx-size", "8192", "--shutdown-timeout-s", "30",
                     "--agent-port", str(agent)]
        self.port, self.agent, self.work, self.name, self.starts = port, agent, work, name, 0
        self.start()

    def start(self):
        self.starts += 1
        self.log = open(os.path.join(self.work, f"{self.name}.{self.starts}.log"), "wb")
        self.proc = subprocess.Popen(self.argv, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while not healthy(self.port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} did not become ready")
            time.sleep(0.05)

    def stop(self, sig=signal.SIGTERM, wait=60):
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(wait)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return "killed"


def agent_says(port):
    """The line a replica's agent port writes."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        return s.recv(64).decode()


def replica_rows(stats):
    """HAProxy's stats CSV rows of the replicas, in both backends."""
    c = http.client.HTTPConnection("127.0.0.1", stats, timeout=2)
    try:
        c.request("GET", "/stats;csv")
        rows = [r.split(",") for r in c.getresponse().read().decode().splitlines()]
    finally:
        c.close()
    return [r for r in rows if len(r) > 22 and r[1] in ("r1", "r2", "r3")]


def all_up(stats, timeout=20):
    """Wait until HAProxy's stats page shows every replica UP in both
    backends (a restarted one needs two checks) and no request on any: a
    key hashed while one is down would move when it comes back, and one
    hashed while the load's last requests still count against a replica's
    bounded load (HAProxy counts each until it has closed its transaction,
    a moment after the client has the answer) could be sent on to the next
    replica."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            up = replica_rows(stats)
            if len(up) == 6 and all(r[17] == "UP" and r[4] == "0" for r in up):
                return True
        except OSError:
            pass
        time.sleep(0.1)
    return False


def downs(stats):
    """How often a check has taken a replica of the hashed backend down."""
    return sum(int(r[22] or 0) for r in replica_rows(stats) if r[0] == "replicas")


def haproxy_config(example, front, rr, stats, ports, agents):
    """The example with this run's ports, plus a round-robin frontend and a
    stats page for the comparison and the figures."""
    text = open(example).read()
    text = re.sub(r"bind :\d+", f"bind 127.0.0.1:{front}", text)

    text = re.sub(r"    server r(\d) 127\.0\.0\.1:\d+ check",
                  lambda m: f"    server r{m.group(1)} 127.0.0.1:{ports[int(m.group(1)) - 1]} check", text)
    # the round-robin backend takes the replicas' load from their agent ports
    servers = "".join(f"    server r{i + 1} 127.0.0.1:{p} check weight 100 agent-check agent-port "
                      f"{agents[i]} agent-inter 1s\n" for i, p in enumerate(ports))
    return text + (f"\nfrontend roundrobin\n    bind 127.0.0.1:{rr}\n    default_backend rr\n\n"
                   "backend rr\n    option httpchk GET /health\n    http-check expect status 200\n"
                   "    default-server inter 500ms fall 1 rise 2\n    balance roundrobin\n" + servers +
                   f"\nfrontend stats\n    bind 127.0.0.1:{stats}\n    stats enable\n    stats uri /stats\n")


# ---- the load ----

BODIES = [
    ("/v1/completions", {"model": "m", "prompt": "Once upon a time", "max_tokens": 8}),
    ("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8}),
    ("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8,
                              "stream": True}),
    ("/v1/responses", {"model": "m", "input": "Hi", "max_output_tokens": 8, "store": False}),
    ("/v1/responses", {"model": "m", "input": "Hi", "max_output_tokens": 8, "store": False, "stream": True}),
]


def one(port, path, body, timeout):
    """(ok, why): a whole answer (a stream to its end event) or the failure."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        if r.status != 200:
            return False, f"{r.status} {data[:120]!r}"
        if body.get("stream"):
            end = b"data: [DONE]" if "chat" in path else b"event: response.completed"
            end2 = b"event: response.incomplete"
            return (end in data or end2 in data), "a stream without its end"
        json.loads(data)
        return True, ""
    except (OSError, ValueError, http.client.HTTPException) as e:
        return False, f"{type(e).__name__}: {e}"
    finally:
        c.close()


class Load:
    def __init__(self, port, workers=6, timeout=20):
        self.port, self.timeout = port, timeout
        self.results = []            # (t0, t1, ok, why, phase)
        self.phase = "before"
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.ths = [threading.Thread(target=self.run, args=(i,)) for i in range(workers)]
        for t in self.ths:
            t.start()

    def run(self, i):
        k = i
        while not self.stop.is_set():
            path, body = BODIES[k % len(BODIES)]
            k += 1
            phase, t0 = self.phase, time.time()
            ok, why = one(self.port, path, body, self.timeout)
            with self.lock:
                self.results.append((t0, time.time(), ok, why, phase))

    def finish(self):
        self.stop.set()
        for t in self.ths:
            t.join(self.timeout + 5)


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


# ---- HAProxy's log: which server each request went to, and when ----

LINE = re.compile(r"\[(\d\d)/(\w{3})/(\d{4}):(\d\d):(\d\d):(\d\d)\.(\d{3})\] (\S+) (\S+)/(\S+) "
                  r"\S+ (-?\d+) \S+ \S+ \S+ \S+ (\d+)/(\d+)/(\d+)/(\d+)/(\+?)(\d+)")
MONTHS = {m: i + 1 for i, m in enumerate("Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split())}


def log_entries(text):
    """[(epoch accept time, backend, server, status, retries)]."""
    out = []
    for m in LINE.finditer(text):
        d, mon, y, hh, mm, ss, ms = m.group(1, 2, 3, 4, 5, 6, 7)
        t = time.mktime((int(y), MONTHS[mon], int(d), int(hh), int(mm), int(ss), 0, 0, -1)) + int(ms) / 1000
        out.append((t, m.group(9), m.group(10), int(m.group(11)), int(m.group(17))))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--moeserve", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--haproxy-cfg", required=True)
    ap.add_argument("--workdir")
    a = ap.parse_args()
    if not shutil.which("haproxy"):
        print("balancer: haproxy is not installed (scripts/install-deps.sh installs Debian's)")
        return 77
    work = a.workdir or tempfile.mkdtemp(prefix="ms-balancer.")
    os.makedirs(work, exist_ok=True)
    failures = []
    t_hash, hash_shares = 0, []

    def check(cond, what):
        if not cond:
            failures.append(what)
        print(f"{'ok  ' if cond else 'FAIL'} {what}")

    ports, agents = [free_port() for _ in range(3)], [free_port() for _ in range(3)]
    front, rr, stats = free_port(), free_port(), free_port()
    reps = [Replica(a.moeserve, a.model, p, agents[i], work, f"r{i + 1}") for i, p in enumerate(ports)]
    said = [agent_says(p) for p in agents]
    check(all(re.fullmatch(r"up ready \d+%\n", s) for s in said), f"each agent port says ready: {said}")
    cfg = os.path.join(work, "haproxy.cfg")
    with open(cfg, "w") as f:
        f.write(haproxy_config(a.haproxy_cfg, front, rr, stats, ports, agents))
    hlog = open(os.path.join(work, "haproxy.log"), "w+")
    ha = subprocess.Popen(["haproxy", "-f", cfg, "-db"], stdout=hlog, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while not healthy(front):
            if time.monotonic() > deadline or ha.poll() is not None:
                hlog.seek(0)
                print(f"FAIL haproxy did not serve:\n{hlog.read()[-2000:]}")
                return 1
            time.sleep(0.1)
        time.sleep(2 * INTER_S + 0.5)  # every server seen up (rise 2)
        load = Load(front)
        time.sleep(4)
        load.phase = "restart"
        for r in reps:
            rc = r.stop()
            check(rc == 0, f"{r.name} exits 0 on SIGTERM under load (got {rc})")
            r.start()
            time.sleep(3 * INTER_S)  # seen up again (rise 2) before the next one goes
        load.phase = "after"
        time.sleep(4)
        load.phase = "kill"
        t_kill = time.time()
        reps[1].stop(signal.SIGKILL)
        time.sleep(4)
        t_back = time.time()
        reps[1].start()
        time.sleep(3 * INTER_S)
        load.phase = "back"
        time.sleep(2)
        load.finish()
        check(all_up(stats), "HAProxy sees every replica up again, none busy")
        t_hash, hash_shares = affinity(front, rr, stats, ports[0], check)
    finally:
        for r in reps:
            if r.proc.poll() is None:
                r.stop()
        ha.send_signal(signal.SIGTERM)
        try:
            ha.wait(10)
        except subprocess.TimeoutExpired:
            ha.kill()
    hlog.seek(0)
    entries = log_entries(hlog.read())
    report(load, entries, t_kill, t_back, check)
    routes(entries, t_hash, hash_shares)
    print(f"balancer: {'FAIL' if failures else 'ok'} ({len(failures)} failed checks)")
    return 1 if failures else 0


def report(load, entries, t_kill, t_back, check):
    res = load.results
    for ph in ("before", "restart", "after", "kill", "back"):
        rs = [r for r in res if r[4] == ph]
        lat = [r[1] - r[0] for r in rs if r[2]]
        bad = [r for r in rs if not r[2]]
        print(f"     {ph:8s} {len(rs):5d} requests, {len(rs) - len(bad):5d} answered 200, {len(bad):3d} failed, "
              f"p50 {pct(lat, 0.5) * 1000:7.1f} ms, p99 {pct(lat, 0.99) * 1000:7.1f} ms")
    retried = sum(1 for e in entries if e[1] == "replicas" and e[4] > 0)
    print(f"     HAProxy retried {retried} requests elsewhere (a draining replica's 503, a refused connection)")
    # a request that was running when the replica was killed belongs to
    # the kill, whatever phase it started in
    early = [r for r in res if r[1] < t_kill and not r[2]]
    check(len([r for r in res if r[1] < t_kill]) > 50, "a steady load ran")
    check(not early, "no request failed through the rolling restart" +
          (f": {len(early)}, e.g. {early[0][3]}" if early else ""))
    killed = [r for r in res if r[1] >= t_kill and not r[2]]
    check(len(killed) <= 6, f"after the SIGKILL at most the requests in flight failed ({len(killed)})")
    check(all(r[1] - r[0] < load.timeout for r in killed), "each failed within the client's bound")
    why = sorted({r[3][:100] for r in killed})[:3]
    check(all(r[0] < t_kill + 2 * INTER_S for r in killed),
          "only requests sent around the kill failed: " + ", ".join(f"{r[0] - t_kill:+.2f} s" for r in killed[:10])
          + (f"; e.g. {why}" if why else ""))
    late = [e for e in entries if e[2] == "r2" and t_kill + 2 * INTER_S + 0.5 < e[0] < t_back]
    check(not late, f"HAProxy sent the killed replica nothing after its check saw it down ({len(late)})")


# ---- prefix affinity ----

def routes(entries, t_hash, shares):
    """Where each missed follow-up's two turns went: the hashed
    conversations are the only requests of the replicas backend since
    t_hash, two by two."""
    hops = [e[2] for e in entries if e[1] == "replicas" and e[0] >= t_hash]
    for s, share in enumerate(shares):
        if share < HIT:
            print(f"     hashed conversation {s} ({share:.2f} cached): its turns went to "
                  f"{', '.join(hops[2 * s:2 * s + 2]) or 'nowhere in the log'}")


def chat(c, session, msgs):
    c.request("POST", "/v1/chat/completions", body=json.dumps(
        {"model": "m", "messages": msgs, "max_tokens": 4, "temperature": 0}),
        headers={"Content-Type": "application/json", "X-Session-Id": session})
    r = c.getresponse()
    return json.loads(r.read())


def first_turn(port, msgs):
    """How many tokens of the follow-up's prompt render the first turn, its
    prompt and answer: the common start of the follow-up's ids and those
    of the conversation up to the answer (/tokenize renders as chat does).
    Asked of a replica directly: through HAProxy these keyless requests
    would count against the bounded load of the next conversation's turn."""
    ids = []
    for m in (msgs[:3], msgs):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        c.request("POST", "/tokenize", body=json.dumps({"model": "m", "messages": m}),
                  headers={"Content-Type": "application/json"})
        ids.append(json.loads(c.getresponse().read())["tokens"])
        c.close()
    n = 0
    while n < min(map(len, ids)) and ids[0][n] == ids[1][n]:
        n += 1
    return n


def affinity(front, rr, stats, replica, check):
    """The follow-ups' cached shares through each frontend; returns when
    the hashed conversations began, for the routes in HAProxy's log."""
    t_hash, down0 = time.time(), downs(stats)
    words = "the sea and the sky and the land under the sun of a long summer day".split()
    shares = {}
    for name, port in (("hash", front), ("round robin", rr)):
        got = []
        for s in range(12):
            system = " ".join(words[(s + i) % len(words)] for i in range(500)) + f" ({name} {s})"
            msgs = [{"role": "system", "content": system}, {"role": "user", "content": "Go on."}]
            # the last conversation's transactions closed in HAProxy: one it
            # still counts could push this turn past its replica's bound
            if not all_up(stats, 5):
                check(False, f"{name} {s}: HAProxy idle, every replica up")
            # one keep-alive connection per conversation, as an SDK's pool
            # has: on it the next turn follows the end of the last one's
            # transaction in HAProxy, which counts against bounded load
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            j1 = chat(c, f"{name}-{s}", msgs)
            msgs += [{"role": "assistant", "content": j1["choices"][0]["message"].get("content") or "."},
                     {"role": "user", "content": "And then?"}]
            j2 = chat(c, f"{name}-{s}", msgs)
            c.close()
            got.append(j2["usage"]["prompt_tokens_details"]["cached_tokens"] / first_turn(replica, msgs))
        shares[name] = got
        print(f"     {name}: second turns' cached share of the first turn (prompt and answer as the "
              f"second renders them): mean {statistics.mean(got):.2f}, min {min(got):.2f}")
        if name == "hash":
            went_down = downs(stats) - down0
    check(min(shares["hash"]) >= HIT, f"with the example's hashing every follow-up hits its prefix (>= {HIT:.0%}): "
          + " ".join(f"{x:.2f}" for x in shares["hash"])
          + (f"; a check took a replica down {went_down} times meanwhile" if went_down else ""))
    check(statistics.mean(shares["hash"]) > statistics.mean(shares["round robin"]),
          "hashing beats round robin on cached tokens")
    return t_hash, shares["hash"]


if __name__ == "__main__":
    sys.exit(main())
