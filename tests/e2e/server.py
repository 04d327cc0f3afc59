#!/usr/bin/python3
"""Integration tests of `moeserve serve` over real HTTP on loopback.

    /usr/bin/python3 tests/e2e/server.py --moeserve BIN --model DIR --chat-model DIR
                                     [--workdir DIR] [--timeout-scale X]

--model is a checkpoint without tokenizer (token-id prompts: the embedded
default model), --chat-model one with the o200k_harmony tokenizer.json
(tests/e2e/make_chat_model.py).  Daemons are started on free loopback ports,
their stderr goes to WORKDIR/NAME.log (printed when one of their cases
fails):

  chat       the chat model: every endpoint, every 400/404/405 error, the
             completion prompt forms, n, echo + logprobs (the
             lm-evaluation-harness shape), stop strings, SSE streams parsed
             chunk by chunk, chat with tools and reasoning_effort,
             /tokenize + /detokenize, keep-alive, cancellation on disconnect,
             16 concurrent clients
  broken     a folder whose config.json is wrong: /health stays 503 with the
             reason, /live 200
  auth       --api-key, --max-body-bytes 2K, --cors-origin, --log-format json:
             401s, 413s, CORS preflight, open /health /live /metrics
  queue      --max-running 1 --max-queue 1 --keepalive-s 1: concurrent long
             requests get 429/503 with Retry-After, the daemon survives; a
             queued stream gets SSE keep-alive comments
  sigterm    SIGTERM during running requests: no new connections, the
             requests complete, exit 0
  sigterm-timeout  --shutdown-timeout-s 1: a request that cannot finish in
             time is cut, the daemon exits 0 promptly

Sampling is greedy (temperature 0) wherever a result is compared with
another.  One line per case, then `server: N passed, M failed`; exit status
1 when a case failed.  Only the standard library is used.
"""
import argparse
import concurrent.futures
import http.client
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

SCALE = 1.0          # --timeout-scale: slower builds (sanitizers) wait longer
RESULTS = []         # (name, ok)
TOKEN_MODEL = "default-model"   # served name of --model (its folder's name)
NO_EOS = {}          # logit_bias that keeps --model from ending early (its eos ids at -100)
NO_EOS_CHAT = {}     # the same for --chat-model


def no_eos(model_dir):
    """{"id": -100} for every eos id of config.json and generation_config.json:
    requests that must run to max_tokens on random weights."""
    ids = set()
    for name in ("config.json", "generation_config.json"):
        try:
            with open(os.path.join(model_dir, name)) as f:
                e = json.load(f).get("eos_token_id")
        except (OSError, ValueError):
            continue
        ids.update(e if isinstance(e, list) else [e] if isinstance(e, int) else [])
    return {str(i): -100 for i in sorted(ids)}


def T(seconds):
    return seconds * SCALE


# ---------------------------------------------------------------------------
# daemons

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Daemon:
    """One `moeserve serve` process on a loopback port."""

    def __init__(self, binary, model, workdir, name, *extra):
        self.name = name
        self.model = model
        self.log_path = os.path.join(workdir, f"{name}.log")
        self.failed = False
        self.argv = [binary, "serve", "--model", model, "--host", "127.0.0.1", *extra]
        self.start()

    def start(self):
        self.port = free_port()
        self.log = open(self.log_path, "wb")
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(self.argv + ["--port", str(self.port)], stdin=subprocess.DEVNULL,
                                     stdout=self.log, stderr=subprocess.STDOUT)

    def port_clash(self):
        """Exited because another process took the port between free_port()
        and the bind (EX_UNAVAILABLE): start again on another."""
        if self.proc.poll() != 69:
            return False
        self.log.close()
        with open(self.log_path, "rb") as f:
            if b"cannot listen" not in f.read():
                return False
        self.start()
        return True

    # -- HTTP --

    def conn(self, timeout=None):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout or T(60))

    def request(self, method, path, body=None, headers=None, timeout=None, conn=None):
        """-> (status, headers dict (lower-case names), body bytes)."""
        h = dict(headers or {})
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
            h.setdefault("Content-Type", "application/json")
        if isinstance(body, str):
            body = body.encode()
        own = conn is None
        c = conn or self.conn(timeout)
        try:
            c.request(method, path, body=body, headers=h)
            r = c.getresponse()
            data = r.read()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, data
        finally:
            if own:
                c.close()

    def json(self, method, path, body=None, headers=None, timeout=None, conn=None):
        """-> (status, headers, parsed JSON body or None)."""
        st, hd, data = self.request(method, path, body, headers, timeout, conn)
        try:
            j = json.loads(data) if data else None
        except ValueError:
            raise AssertionError(f"{method} {path}: {st} with a body that is not JSON: {data[:300]!r}")
        return st, hd, j

    def post(self, path, body, **kw):
        return self.json("POST", path, body, **kw)

    def metrics(self):
        st, hd, data = self.request("GET", "/metrics")
        if st != 200:
            raise AssertionError(f"/metrics: {st}")
        return parse_metrics(data.decode())

    # -- the engine's state, as /metrics gives it --
    #
    # The gauges are published at the end of each engine step, so they
    # trail by up to a step: a request whose answer the client already has
    # may still count as running. A case that waits for the state its own
    # requests cause must start from an idle daemon (wait_idle), or a
    # request of the case before can satisfy its wait.

    def queue_state(self):
        ms = self.metrics()
        return (metric(ms, "moeserve:num_requests_running"),
                metric(ms, "moeserve:num_requests_waiting"))

    def wait_idle(self, timeout=None):
        """Wait until no request runs or waits."""
        deadline = time.monotonic() + (timeout or T(10))
        while True:
            run, wait = self.queue_state()
            if run == 0 and wait == 0:
                return
            check(time.monotonic() < deadline,
                  f"{self.name}: not idle: {run:.0f} running, {wait:.0f} waiting")
            time.sleep(0.01)

    def wait_running(self, n, what, timeout=None):
        """Wait until n requests run and none waits: the requests a case
        sent to an idle daemon (wait_idle first) have all been admitted."""
        deadline = time.monotonic() + (timeout or T(10))
        while True:
            run, wait = self.queue_state()
            if run >= n and wait == 0:
                return
            check(time.monotonic() < deadline,
                  f"{what}: {run:.0f} running, {wait:.0f} waiting (want {n} running)")
            time.sleep(0.01)

    # -- life --

    def wait_ready(self, timeout=None):
        """Poll /health until 200. Every earlier answer must be 503 with a
        JSON reason. Returns the 503 bodies seen."""
        deadline = time.monotonic() + (timeout or T(60))
        seen = []
        clashes = 0
        while True:
            if clashes < 5 and self.port_clash():
                clashes += 1
                continue
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.name}: exited with {self.proc.returncode} before ready")
            try:
                st, _, j = self.json("GET", "/health", timeout=T(5))
                if st == 200:
                    if j != {"status": "ok"}:
                        raise AssertionError(f"/health 200 body {j}")
                    return seen
                if st != 503 or not isinstance(j, dict) or not j.get("reason"):
                    raise AssertionError(f"/health before ready: {st} {j}")
                seen.append(j)
            except (ConnectionError, socket.timeout, http.client.HTTPException):
                pass  # not listening yet
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name}: not ready after {time.monotonic() - self.t0:.1f} s")
            time.sleep(0.01)

    def wait_listening(self, timeout=None):
        deadline = time.monotonic() + (timeout or T(30))
        clashes = 0
        while True:
            if clashes < 5 and self.port_clash():
                clashes += 1
                continue
            check(self.proc.poll() is None, f"{self.name}: exited with {self.proc.returncode}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                check(time.monotonic() < deadline, f"{self.name}: not listening")
                time.sleep(0.01)

    def signal(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)

    def wait_exit(self, timeout):
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self):
        """SIGTERM, then SIGKILL if it hangs. Returns the exit status."""
        self.signal(signal.SIGTERM)
        rc = self.wait_exit(T(40))
        if rc is None:
            self.proc.kill()
            rc = self.proc.wait()
            self.failed = True
            print(f"  {self.name}: did not exit within {T(40):.0f} s of SIGTERM: killed")
        self.log.close()
        if self.failed:
            self.print_log()
        return rc

    def print_log(self, tail=6000):
        try:
            with open(self.log_path, "rb") as f:
                data = f.read()
        except OSError:
            return
        text = data[-tail:].decode(errors="replace")
        print(f"  --- {self.log_path} (last {tail} bytes) ---")
        for line in text.splitlines():
            print("  | " + line)
        print("  ---")


# ---------------------------------------------------------------------------
# cases and checks

def case(name, fn, *args, daemon=None):
    t = time.monotonic()
    try:
        fn(*args)
        ok, detail = True, ""
    except Exception as e:  # noqa: BLE001  (any failure is the case's)
        ok = False
        detail = f"{type(e).__name__}: {e}" if isinstance(e, AssertionError) else traceback.format_exc()
        if daemon is not None:
            daemon.failed = True
    RESULTS.append((name, ok))
    dt = time.monotonic() - t
    print(f"{'ok  ' if ok else 'FAIL'} {name} ({dt:.2f} s){'' if ok else chr(10) + '     ' + detail.strip()}",
          flush=True)
    return ok


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def script_args(doc, prefix):
    """The arguments of a smaller script built on this module: --moeserve,
    --model, --workdir (made; a temporary folder by default). Sets SCALE
    from MS_TEST_TIMEOUT_SCALE."""
    global SCALE
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--moeserve", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--workdir")
    a = ap.parse_args()
    SCALE = float(os.environ.get("MS_TEST_TIMEOUT_SCALE", "1") or 1)
    a.workdir = a.workdir or tempfile.mkdtemp(prefix=prefix)
    os.makedirs(a.workdir, exist_ok=True)
    return a


def summary(name, t0=None):
    """Print the count of RESULTS; the exit status (1 when one failed)."""
    failed = sum(1 for _, ok in RESULTS if not ok)
    took = f" ({time.monotonic() - t0:.1f} s)" if t0 is not None else ""
    print(f"{name}: {len(RESULTS) - failed} passed, {failed} failed{took}")
    return 1 if failed else 0


def expect_error(resp, status, param=..., needles=(), type_=None):
    """An error response: the status and the OpenAI envelope
    {"error": {"message", "type", "param", "code"}}."""
    st, hd, j = resp
    check(st == status, f"status {st}, want {status}: {j}")
    check(hd.get("content-type", "").startswith("application/json"),
          f"Content-Type {hd.get('content-type')!r} of a {status}")
    check(isinstance(j, dict) and set(j) == {"error"}, f"not an error envelope: {j}")
    e = j["error"]
    check(isinstance(e, dict) and {"message", "type", "param", "code"} <= set(e),
          f"the envelope lacks message/type/param/code: {e}")
    check(isinstance(e["message"], str) and e["message"], f"empty message: {e}")
    check(isinstance(e["type"], str) and e["type"], f"empty type: {e}")
    check(e["param"] is None or isinstance(e["param"], str), f"param {e['param']!r}")
    if param is not ...:
        check(e["param"] == param, f"param {e['param']!r}, want {param!r}: {e['message']}")
    if type_:
        check(e["type"] == type_, f"type {e['type']!r}, want {type_!r}")
    for n in needles:
        check(str(n) in e["message"], f"message {e['message']!r} does not name {n!r}")
    if status in (429, 503):
        ra = hd.get("retry-after")
        check(ra is not None and ra.isdigit(), f"{status} without a Retry-After: {hd}")
    return e


def check_usage(u, where, max_completion=None, prompt=None):
    check(isinstance(u, dict), f"{where}: no usage")
    for f in ("prompt_tokens", "completion_tokens", "total_tokens"):
        check(isinstance(u.get(f), int) and u[f] >= 0, f"{where}: usage.{f} = {u.get(f)!r}")
    check(u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"],
          f"{where}: total_tokens != prompt + completion: {u}")
    d = u.get("prompt_tokens_details")
    check(isinstance(d, dict) and isinstance(d.get("cached_tokens"), int)
          and 0 <= d["cached_tokens"] <= u["prompt_tokens"],
          f"{where}: usage.prompt_tokens_details.cached_tokens missing or wrong: {u}")
    if max_completion is not None:
        check(u["completion_tokens"] <= max_completion,
              f"{where}: {u['completion_tokens']} completion tokens > max_tokens {max_completion}")
    if prompt is not None:
        check(u["prompt_tokens"] == prompt, f"{where}: prompt_tokens {u['prompt_tokens']}, want {prompt}")


def check_head(j, obj, model, where):
    check(isinstance(j, dict), f"{where}: {j!r}")
    check(isinstance(j.get("id"), str) and j["id"], f"{where}: id {j.get('id')!r}")
    check(j.get("object") == obj, f"{where}: object {j.get('object')!r}, want {obj!r}")
    check(isinstance(j.get("created"), int), f"{where}: created {j.get('created')!r}")
    check(j.get("model") == model, f"{where}: model {j.get('model')!r}, want {model!r}")
    check(isinstance(j.get("choices"), list), f"{where}: choices {j.get('choices')!r}")


FINISH = ("stop", "length")


def check_completion(st, j, model, n_choices, max_tokens=None, where="completion"):
    check(st == 200, f"{where}: status {st}: {j}")
    check_head(j, "text_completion", model, where)
    check(len(j["choices"]) == n_choices, f"{where}: {len(j['choices'])} choices, want {n_choices}")
    for i, c in enumerate(j["choices"]):
        check(c.get("index") == i, f"{where}: choice {i} has index {c.get('index')}")
        check(isinstance(c.get("text"), str), f"{where}: choice {i} text {c.get('text')!r}")
        check(c.get("finish_reason") in FINISH, f"{where}: finish_reason {c.get('finish_reason')!r}")
        check("logprobs" in c, f"{where}: choice {i} lacks logprobs")
    check_usage(j.get("usage"), where,
                None if max_tokens is None else max_tokens * n_choices)


def check_chat(st, j, model, where="chat", max_tokens=None, finish=FINISH + ("tool_calls",)):
    check(st == 200, f"{where}: status {st}: {j}")
    check_head(j, "chat.completion", model, where)
    check(len(j["choices"]) >= 1, f"{where}: no choices")
    for i, c in enumerate(j["choices"]):
        m = c.get("message")
        check(c.get("index") == i, f"{where}: index {c.get('index')}")
        check(isinstance(m, dict) and m.get("role") == "assistant", f"{where}: message {m!r}")
        check(isinstance(m.get("content"), str) or (m.get("content") is None and m.get("tool_calls")),
              f"{where}: content {m.get('content')!r}")
        for tc in m.get("tool_calls") or []:
            check(tc.get("type") == "function" and isinstance(tc.get("id"), str)
                  and isinstance(tc["function"].get("name"), str)
                  and isinstance(tc["function"].get("arguments"), str), f"{where}: tool call {tc}")
        check(c.get("finish_reason") in finish, f"{where}: finish_reason {c.get('finish_reason')!r}")
    check_usage(j.get("usage"), where, max_tokens)


def parse_metrics(text):
    """Prometheus text format -> {(name, ((label, value), ...)): float}."""
    out = {}
    line_re = re.compile(r'^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)$')
    label_re = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = line_re.match(line)
        if not m:
            raise AssertionError(f"/metrics: unparsable line {line!r}")
        labels = tuple(sorted(label_re.findall(m.group(2) or "")))
        out[(m.group(1), labels)] = float(m.group(3))
    return out


def metric(ms, name, **labels):
    """Sum of the samples of name whose labels include labels."""
    tot = 0.0
    for (n, ls), v in ms.items():
        d = dict(ls)
        if n == name and all(d.get(k) == v2 for k, v2 in labels.items()):
            tot += v
    return tot


def tokens_for(d, seconds, lo=24, hi=3000):
    """max_tokens that keep one request of the token-id model running for
    about `seconds` on this build and machine (sanitizer builds are several
    times slower): measured with 32-token requests, the fastest of three.
    (One measurement on the queue section's daemon read ~240 tokens/s where
    it decodes thousands; the keep-alive case's request sized by it once
    finished before the first 1-s keep-alive comment was due.)"""
    body = {"prompt": [1, 2, 3], "max_tokens": 32, "temperature": 0, "logit_bias": NO_EOS}
    d.post("/v1/completions", {**body, "max_tokens": 4})  # warm
    dt = float("inf")
    for _ in range(3):
        t = time.monotonic()
        st, _, j = d.post("/v1/completions", body)
        dt = min(dt, time.monotonic() - t)
        check(st == 200 and j["usage"]["completion_tokens"] == 32, f"calibration request: {st} {j}")
    n = max(lo, min(hi, int(seconds * 32 / dt)))
    print(f"     {32 / dt:.0f} tokens/s alone: max_tokens {n} for ~{seconds} s")
    return n


# ---------------------------------------------------------------------------
# SSE, parsed as it arrives

class SSE:
    """A streamed response read event by event: each `data: ...` line and
    its blank line, checked as it comes."""

    def __init__(self, d, path, body, headers=None, timeout=None):
        self.c = d.conn(timeout)
        h = {"Content-Type": "application/json", **(headers or {})}
        self.c.request("POST", path, body=json.dumps(body), headers=h)
        self.r = self.c.getresponse()
        self.status = self.r.status
        self.headers = {k.lower(): v for k, v in self.r.getheaders()}
        self.done = False
        self.comments = 0

    def typed_events(self):
        """The Responses API's stream: yield (event name, parsed data) of each
        `event: T` + `data: J` + blank line, to the end of the body (no
        [DONE] there)."""
        while True:
            line = self.r.readline()
            if line == b"":
                return
            line = line.rstrip(b"\r\n")
            if line.startswith(b":"):          # keep-alive comment
                check(self.r.readline().strip() == b"", "comment not followed by a blank line")
                self.comments += 1
                continue
            check(line.startswith(b"event: "), f"not an SSE event line: {line[:200]!r}")
            data = self.r.readline().rstrip(b"\r\n")
            check(data.startswith(b"data: "), f"event without its data line: {data[:200]!r}")
            check(self.r.readline() in (b"\n", b"\r\n"), "event not ended by a blank line")
            try:
                j = json.loads(data[6:])
            except ValueError:
                raise AssertionError(f"an event that is not JSON: {data[:300]!r}")
            yield line[7:].decode(), j

    def events(self):
        """Yield each event's parsed JSON; stops after [DONE] (checked to be
        the end of the body)."""
        while True:
            line = self.r.readline()
            check(line != b"", "the stream ended without data: [DONE]")
            check(line.endswith(b"\n"), f"a line not ended by a newline: {line!r}")
            line = line.rstrip(b"\r\n")
            if line.startswith(b":"):          # an SSE comment (keep-alive)
                blank = self.r.readline()
                check(blank.strip() == b"", f"comment not followed by a blank line: {blank!r}")
                self.comments += 1
                continue
            check(line.startswith(b"data: "), f"not an SSE data line: {line[:200]!r}")
            blank = self.r.readline()
            check(blank in (b"\n", b"\r\n"), f"event not ended by a blank line: {blank[:200]!r}")
            payload = line[6:]
            if payload == b"[DONE]":
                self.done = True
                rest = self.r.read()
                check(rest == b"", f"bytes after data: [DONE]: {rest[:200]!r}")
                return
            try:
                j = json.loads(payload)
            except ValueError:
                raise AssertionError(f"a chunk that is not JSON: {payload[:300]!r}")
            yield j

    def close(self):
        self.c.close()


class SSE_GET(SSE):
    """A stream read with GET (a background response's, again)."""

    def __init__(self, d, path, timeout=None):
        self.c = d.conn(timeout)
        self.c.request("GET", path)
        self.r = self.c.getresponse()
        self.status = self.r.status
        self.headers = {k.lower(): v for k, v in self.r.getheaders()}
        if self.status != 200:
            raise AssertionError(f"GET {path}: {self.status} {self.r.read()[:300]!r}")
        self.done = False
        self.comments = 0


def check_sse_headers(s):
    check(s.status == 200, f"stream status {s.status}")
    check(s.headers.get("content-type", "").startswith("text/event-stream"),
          f"Content-Type {s.headers.get('content-type')!r}")
    check(s.headers.get("cache-control") == "no-cache", f"Cache-Control {s.headers.get('cache-control')!r}")
    check(s.headers.get("x-accel-buffering") == "no",
          f"X-Accel-Buffering {s.headers.get('x-accel-buffering')!r}")


def stream_completion(d, body, model, n_choices=1):
    """Run a streamed completion; return (texts per choice, finish per
    choice, usage or None, number of chunks, logprob tokens per choice)."""
    s = SSE(d, "/v1/completions", body)
    try:
        check_sse_headers(s)
        texts = [""] * n_choices
        fins = [None] * n_choices
        lp_tokens = [[] for _ in range(n_choices)]
        usage = None
        chunks = 0
        for j in s.events():
            chunks += 1
            check_head(j, "text_completion", model, "completion chunk")
            check(usage is None, "a chunk after the usage chunk")
            if j.get("usage") is not None:
                check(j["choices"] == [], f"the usage chunk has choices: {j['choices']}")
                check(all(f is not None for f in fins), "the usage chunk before a choice finished")
                usage = j["usage"]
                continue
            check(len(j["choices"]) == 1, f"a chunk with {len(j['choices'])} choices")
            c = j["choices"][0]
            i = c.get("index")
            check(isinstance(i, int) and 0 <= i < n_choices, f"chunk index {i}")
            check(fins[i] is None, f"choice {i}: a chunk after its finish_reason")
            check(isinstance(c.get("text"), str), f"chunk text {c.get('text')!r}")
            texts[i] += c["text"]
            if c.get("logprobs"):
                lp = c["logprobs"]
                check(len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"])
                      == len(lp["text_offset"]), f"chunk logprobs of unequal lengths: {lp}")
                lp_tokens[i] += lp["tokens"]
            if c.get("finish_reason") is not None:
                check(c["finish_reason"] in FINISH, f"finish_reason {c['finish_reason']!r}")
                fins[i] = c["finish_reason"]
        check(s.done, "no [DONE]")
        check(all(f is not None for f in fins), f"choices without a finish_reason: {fins}")
        return texts, fins, usage, chunks, lp_tokens
    finally:
        s.close()


def stream_chat(d, body, model):
    """-> (content, reasoning, tool_calls deltas, finish, usage, chunks)."""
    s = SSE(d, "/v1/chat/completions", body)
    try:
        check_sse_headers(s)
        content, reasoning, tools = "", "", []
        finish, usage, chunks, first = None, None, 0, True
        for j in s.events():
            chunks += 1
            check_head(j, "chat.completion.chunk", model, "chat chunk")
            check(usage is None, "a chunk after the usage chunk")
            if j.get("usage") is not None:
                check(j["choices"] == [], f"the usage chunk has choices: {j['choices']}")
                check(finish is not None, "the usage chunk before the finish chunk")
                usage = j["usage"]
                continue
            check(len(j["choices"]) == 1, f"a chunk with {len(j['choices'])} choices")
            c = j["choices"][0]
            check(c.get("index") == 0, f"index {c.get('index')}")
            check(finish is None, "a chunk after the finish chunk")
            dl = c.get("delta")
            check(isinstance(dl, dict), f"delta {dl!r}")
            if first:
                check(dl.get("role") == "assistant", f"the first delta has no role: {dl}")
                first = False
            else:
                check("role" not in dl, f"a role in a later delta: {dl}")
            content += dl.get("content") or ""
            reasoning += dl.get("reasoning_content") or ""
            tools += dl.get("tool_calls") or []
            if c.get("finish_reason") is not None:
                finish = c["finish_reason"]
        check(s.done, "no [DONE]")
        check(not first, "no chunk at all")
        check(finish in FINISH + ("tool_calls",), f"finish_reason {finish!r}")
        return content, reasoning, tools, finish, usage, chunks
    finally:
        s.close()


# ---------------------------------------------------------------------------
# the chat daemon (chat model: tokenizer + harmony)

def chat_cases(d, model_name, sdk):
    M = model_name
    P = "The capital of France is"
    ref = {}

    def endpoints():
        st, hd, j = d.json("GET", "/health")
        check(st == 200 and j == {"status": "ok"}, f"/health {st} {j}")
        check(hd.get("content-type", "").startswith("application/json"), "/health Content-Type")
        st, _, j = d.json("GET", "/live")
        check(st == 200 and j.get("status") == "alive", f"/live {st} {j}")
        st, _, j = d.json("GET", "/v1/models")
        check(st == 200 and j.get("object") == "list", f"/v1/models {st} {j}")
        ids = [m.get("id") for m in j["data"]]
        check(ids == [M], f"/v1/models ids {ids}, want [{M!r}] (the folder's name)")
        card = j["data"][0]
        check(card.get("object") == "model" and isinstance(card.get("created"), int)
              and isinstance(card.get("owned_by"), str), f"model card {card}")
        check(card.get("max_model_len") == 8192, f"max_model_len {card.get('max_model_len')}")
        st, _, j = d.json("GET", f"/v1/models/{M}")
        check(st == 200 and j.get("id") == M, f"/v1/models/{M}: {st} {j}")
        st, hd, data = d.request("GET", "/metrics")
        check(st == 200, f"/metrics {st}")
        check(hd.get("content-type", "").startswith("text/plain; version=0.0.4"),
              f"/metrics Content-Type {hd.get('content-type')!r}")
        ms = parse_metrics(data.decode())
        check(metric(ms, "moeserve:model_loaded", model_name=M) == 1, "model_loaded is not 1")
        for name in ("moeserve:num_requests_running", "moeserve:num_requests_waiting",
                     "moeserve:kv_cache_usage_perc", "moeserve:generation_tokens_total",
                     "moeserve:time_to_first_token_seconds_count",
                     "moeserve:spec_decode_num_drafts_total", "moeserve:spec_decode_num_draft_tokens_total",
                     "moeserve:spec_decode_num_accepted_tokens_total",
                     "moeserve:spec_decode_num_accepted_tokens_per_pos_total",
                     "moeserve:spec_decode_cache_bytes", "moeserve:spec_decode_index_bytes"):
            check(any(n == name for n, _ in ms), f"/metrics lacks {name}")

    def completion_string():
        st, _, j = d.post("/tokenize", {"prompt": P})
        check(st == 200, f"/tokenize {st} {j}")
        n_prompt = j["count"]
        st, _, j = d.post("/v1/completions", {"model": M, "prompt": P, "max_tokens": 12, "temperature": 0})
        check_completion(st, j, M, 1, 12)
        check(j["choices"][0]["logprobs"] is None, "logprobs not null without logprobs")
        check(j["id"].startswith("cmpl-"), f"id {j['id']}")
        check_usage(j["usage"], "completion", 12, prompt=n_prompt)
        ref["P"] = j["choices"][0]["text"]
        ref["P_fin"] = j["choices"][0]["finish_reason"]
        if ref["P_fin"] == "length":
            check(j["usage"]["completion_tokens"] == 12, f"finish length after {j['usage']['completion_tokens']}")
        # the same again: deterministic, and the prefix cache is reported
        st, _, j2 = d.post("/v1/completions", {"prompt": P, "max_tokens": 12, "temperature": 0})
        check_completion(st, j2, M, 1, 12)
        check(j2["choices"][0]["text"] == ref["P"], "greedy completion differs between two runs")

    def completion_list_of_strings():
        prompts = [P, "Hello, world", "1 2 3 4"]
        st, _, j = d.post("/v1/completions", {"prompt": prompts, "max_tokens": 6, "temperature": 0})
        check_completion(st, j, M, 3, 6)
        counts = [d.post("/tokenize", {"prompt": p})[2]["count"] for p in prompts]
        check(j["usage"]["prompt_tokens"] == sum(counts),
              f"prompt_tokens {j['usage']['prompt_tokens']}, want {sum(counts)}")
        # each choice equals the prompt run alone (batching changes nothing)
        for i, p in enumerate(prompts):
            st, _, one = d.post("/v1/completions", {"prompt": p, "max_tokens": 6, "temperature": 0})
            check_completion(st, one, M, 1, 6)
            check(one["choices"][0]["text"] == j["choices"][i]["text"],
                  f"prompt {i}: {one['choices'][0]['text']!r} alone, {j['choices'][i]['text']!r} in a list")

    def completion_tokens():
        ids = d.post("/tokenize", {"prompt": P})[2]["tokens"]
        st, _, j = d.post("/v1/completions", {"prompt": ids, "max_tokens": 12, "temperature": 0})
        check_completion(st, j, M, 1, 12)
        check_usage(j["usage"], "token prompt", prompt=len(ids))
        check(j["choices"][0]["text"] == ref["P"], "token prompt and text prompt differ")
        st, _, j = d.post("/v1/completions", {"prompt": [ids, [1, 2, 3]], "max_tokens": 4, "temperature": 0})
        check_completion(st, j, M, 2, 4)
        check_usage(j["usage"], "list of token lists", prompt=len(ids) + 3)

    def completion_n():
        st, _, j = d.post("/v1/completions", {"prompt": [5, 6, 7], "max_tokens": 5, "n": 3,
                                              "temperature": 1.0, "seed": 7})
        check_completion(st, j, M, 3, 5)
        check_usage(j["usage"], "n=3", prompt=3)  # the prompt counts once
        texts = [c["text"] for c in j["choices"]]
        check(len(set(texts)) > 1, f"n=3 at temperature 1 gave three equal texts {texts}")
        # n with two prompts: choices grouped by prompt
        st, _, j = d.post("/v1/completions", {"prompt": [P, [1, 2]], "max_tokens": 4, "n": 2, "temperature": 0})
        check_completion(st, j, M, 4, 4)
        t0 = j["choices"][0]["text"].rstrip("\ufffd")  # (a cut may end inside a character)
        check(j["choices"][0]["text"] == j["choices"][1]["text"] and ref["P"].startswith(t0),
              f"n=2 greedy choices of the first prompt: {j['choices'][0]['text']!r}, {j['choices'][1]['text']!r}; "
              f"12 tokens alone: {ref['P']!r}")

    def echo_logprobs():
        # lm-evaluation-harness loglikelihood: echo, logprobs, max_tokens 0
        text = "The quick brown fox jumps over the lazy dog"
        tok = d.post("/tokenize", {"prompt": text})[2]["tokens"]
        st, _, j = d.post("/v1/completions", {"model": M, "prompt": text, "max_tokens": 0, "echo": True,
                                              "logprobs": 3, "temperature": 0})
        check_completion(st, j, M, 1, 0)
        c = j["choices"][0]
        check(c["text"] == text, f"echo text {c['text']!r}")
        lp = c["logprobs"]
        check(isinstance(lp, dict), f"logprobs {lp!r}")
        n = len(tok)
        for k in ("tokens", "token_logprobs", "top_logprobs", "text_offset"):
            check(isinstance(lp.get(k), list) and len(lp[k]) == n, f"logprobs.{k}: {lp.get(k)!r}, want {n} items")
        check("".join(lp["tokens"]) == text, f"tokens {lp['tokens']} do not spell the prompt")
        check(lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None,
              "the first token has a logprob (nothing precedes it)")
        off = 0
        for i in range(n):
            check(lp["text_offset"][i] == off, f"text_offset[{i}] = {lp['text_offset'][i]}, want {off}")
            off += len(lp["tokens"][i])
            if i == 0:
                continue
            v, top = lp["token_logprobs"][i], lp["top_logprobs"][i]
            check(isinstance(v, float) and v <= 0 and math.isfinite(v), f"token_logprobs[{i}] = {v!r}")
            check(isinstance(top, dict) and 1 <= len(top) <= 3, f"top_logprobs[{i}] = {top!r}")
            check(all(x <= 0 for x in top.values()), f"top_logprobs[{i}] positive: {top}")
            check(max(top.values()) >= v - 1e-5, f"position {i}: the token beats the top: {v} > {top}")
        check_usage(j["usage"], "echo", 0, prompt=n)
        check(j["usage"]["completion_tokens"] == 0, "completion tokens with max_tokens 0")
        # max_tokens 1 (lm-eval's greedy check): the generated token is the argmax
        st, _, j = d.post("/v1/completions", {"prompt": tok, "max_tokens": 1, "echo": True, "logprobs": 1,
                                              "temperature": 0})
        check_completion(st, j, M, 1, 1)
        lp = j["choices"][0]["logprobs"]
        check(len(lp["tokens"]) == n + 1, f"{len(lp['tokens'])} tokens, want {n + 1}")
        g, gv, gtop = lp["tokens"][n], lp["token_logprobs"][n], lp["top_logprobs"][n]
        check(isinstance(gtop, dict) and len(gtop) == 1, f"top of the generated token {gtop}")
        (tt, tv), = gtop.items()
        check(tt == g and abs(tv - gv) < 1e-4, f"greedy token {g!r} ({gv}) is not the top one {gtop}")
        # decode and prefill agree: the generated token's logprob again as a prompt logprob
        gid = d.post("/v1/completions", {"prompt": tok, "max_tokens": 1, "temperature": 0})
        gtext = gid[2]["choices"][0]["text"]
        ids2 = d.post("/tokenize", {"prompt": text + gtext})[2]["tokens"]
        if ids2[:n] == tok and len(ids2) == n + 1:
            st, _, j = d.post("/v1/completions", {"prompt": ids2, "max_tokens": 0, "echo": True, "logprobs": 0})
            check(st == 200, f"{st} {j}")
            pv = j["choices"][0]["logprobs"]["token_logprobs"][n]
            check(abs(pv - gv) < 1e-3, f"logprob of the generated token {gv} vs as a prompt token {pv}")
        # echo without logprobs, with generation
        st, _, j = d.post("/v1/completions", {"prompt": text, "max_tokens": 3, "echo": True, "temperature": 0})
        check_completion(st, j, M, 1, 3)
        check(j["choices"][0]["text"].startswith(text), "echo: the text does not start with the prompt")
        # generated-token logprobs without echo
        st, _, j = d.post("/v1/completions", {"prompt": text, "max_tokens": 4, "logprobs": 2, "temperature": 0})
        check_completion(st, j, M, 1, 4)
        lp = j["choices"][0]["logprobs"]
        check(len(lp["tokens"]) == j["usage"]["completion_tokens"]
              and all(isinstance(v, float) for v in lp["token_logprobs"]), f"logprobs {lp}")
        if "\ufffd" not in "".join(lp["tokens"]):  # (a token ending inside a character shows U+FFFD)
            check("".join(lp["tokens"]) == j["choices"][0]["text"], "logprob tokens do not spell the text")

    def stop_strings():
        body = {"prompt": "Once upon a time", "max_tokens": 16, "temperature": 0}
        st, _, j = d.post("/v1/completions", body)
        check_completion(st, j, M, 1, 16)
        full = j["choices"][0]["text"]
        check(len(full) >= 8, f"completion too short to cut: {full!r}")
        mid = len(full) // 2
        stop = full[mid:mid + 2]
        cut = full[:full.index(stop)]
        st, _, j = d.post("/v1/completions", {**body, "stop": [stop, "\u2603never\u2603"]})
        check_completion(st, j, M, 1, 16)
        c = j["choices"][0]
        check(c["finish_reason"] == "stop", f"finish_reason {c['finish_reason']!r} with stop {stop!r} in {full!r}")
        check(c["text"] == cut, f"stop {stop!r}: text {c['text']!r}, want {cut!r}")
        check(j["usage"]["completion_tokens"] < 16, "stopped but all tokens generated")
        # streamed: the same text, no part of the stop string emitted
        texts, fins, _, _, _ = stream_completion(d, {**body, "stop": stop, "stream": True}, M)
        check(texts[0] == cut and fins[0] == "stop", f"streamed stop: {texts[0]!r} ({fins[0]}), want {cut!r}")
        # a stop string that never occurs
        st, _, j = d.post("/v1/completions", {**body, "stop": "\u2603\u2603\u2603"})
        check(j["choices"][0]["text"] == full, "a stop string that never occurs changed the text")

    def eos_controls():
        # the eos ids pushed far ahead: the model ends at once, unless
        # min_tokens holds them back or ignore_eos lets it run to max_tokens
        # (config.json's: the ids a completion stops at; generation_config's
        # add harmony's end-of-turn tokens, which are text here)
        with open(os.path.join(d.model, "config.json")) as f:
            ids = json.load(f)["eos_token_id"]
        eos = {str(i): 100 for i in (ids if isinstance(ids, list) else [ids])}
        body = {"prompt": "Once upon a time", "max_tokens": 10, "temperature": 0, "logit_bias": eos}
        runs = [({}, 1, "stop"), ({"min_tokens": 5}, 6, "stop"), ({"ignore_eos": True}, 10, "length"),
                ({"ignore_eos": True, "min_tokens": 3}, 10, "length")]
        for extra, n, fin in runs:
            st, _, j = d.post("/v1/completions", {**body, **extra})
            check(st == 200 and j["usage"]["completion_tokens"] == n and
                  j["choices"][0]["finish_reason"] == fin, f"{extra}: {st} {j}")
        st, _, j = d.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                                   "max_tokens": 12, "ignore_eos": True})
        check(st == 200 and j["usage"]["completion_tokens"] == 12, f"chat ignore_eos: {st} {j}")
        expect_error(d.post("/v1/completions", {**body, "min_tokens": 11}), 400, "min_tokens")
        # what is refused rather than ignored
        expect_error(d.post("/v1/completions", {**body, "best_of": 3}), 400, "best_of", ("n",))
        st, _, j = d.post("/v1/completions", {**body, "best_of": 2, "n": 2})
        check(st == 200 and len(j["choices"]) == 2, f"best_of = n: {st} {j}")
        expect_error(d.post("/v1/completions", {**body, "suffix": "end"}), 400, "suffix",
                     ("fill-in-the-middle",))
        st, _, _ = d.post("/v1/completions", {**body, "suffix": ""})
        check(st == 200, f"an empty suffix: {st}")
        chat = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 2}
        expect_error(d.post("/v1/chat/completions", {**chat, "echo": True}), 400, "echo")
        expect_error(d.post("/v1/chat/completions", {**chat, "parallel_tool_calls": "no"}), 400,
                     "parallel_tool_calls")
        for effort in ("none", "minimal", "xhigh", "max"):
            st, _, j = d.post("/v1/chat/completions", {**chat, "reasoning_effort": effort})
            check(st == 200, f"reasoning_effort {effort}: {st} {j}")

    def stream_cmpl():
        body = {"model": M, "prompt": P, "max_tokens": 12, "temperature": 0, "stream": True,
                "stream_options": {"include_usage": True}}
        texts, fins, usage, chunks, _ = stream_completion(d, body, M)
        check(texts[0] == ref["P"], f"streamed text {texts[0]!r} != {ref['P']!r}")
        check(fins[0] == ref["P_fin"], f"finish {fins[0]} != {ref['P_fin']}")
        check(usage is not None, "include_usage without a usage chunk")
        check_usage(usage, "stream usage", 12)
        check(chunks >= 3, f"only {chunks} chunks for 12 tokens")
        # without include_usage: no usage chunk
        body2 = dict(body)
        del body2["stream_options"]
        texts, fins, usage, _, _ = stream_completion(d, body2, M)
        check(usage is None and texts[0] == ref["P"], "stream without include_usage")
        # n = 2 and two prompts, with logprobs
        body3 = {"prompt": [P, [1, 2, 3]], "n": 2, "max_tokens": 5, "temperature": 0, "stream": True,
                 "logprobs": 1, "stream_options": {"include_usage": True}}
        texts, fins, usage, _, lpt = stream_completion(d, body3, M, 4)
        check(texts[0] == texts[1] and texts[2] == texts[3], f"greedy n=2 streams differ: {texts}")
        check_usage(usage, "stream n=2", 20)
        check(sum(map(len, lpt)) == usage["completion_tokens"],
              f"{sum(map(len, lpt))} streamed logprob tokens for {usage['completion_tokens']} generated")
        for i in range(4):  # (a token that ends inside a character shows U+FFFD)
            if "\ufffd" not in "".join(lpt[i]) + texts[i]:
                check("".join(lpt[i]) == texts[i], f"choice {i}: logprob tokens {lpt[i]} vs text {texts[i]!r}")
        # the first chunk arrives before the last token is generated (streaming, not buffering)
        s = SSE(d, "/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 64, "temperature": 0, "stream": True,
                                       "stop": [], "logit_bias": NO_EOS_CHAT})
        try:
            check_sse_headers(s)
            ev = s.events()
            t0 = time.monotonic()
            next(ev)
            t_first = time.monotonic() - t0
            n = 1 + sum(1 for _ in ev)
            t_all = time.monotonic() - t0
            check(n >= 16, f"{n} chunks for 64 tokens")
            check(t_first < t_all / 2, f"first chunk after {t_first:.3f} s of {t_all:.3f} s: buffered?")
        finally:
            s.close()

    def chat_plain():
        msgs = [{"role": "system", "content": "You are terse."},
                {"role": "user", "content": [{"type": "text", "text": "Name a color."}]}]
        body = {"model": M, "messages": msgs, "max_tokens": 10, "temperature": 0}
        st, _, j = d.post("/v1/chat/completions", body)
        check_chat(st, j, M, max_tokens=10)
        check(j["id"].startswith("chatcmpl-"), f"id {j['id']}")
        check(j["choices"][0]["logprobs"] is None, "logprobs not null")
        ref["chat"] = j["choices"][0]["message"]["content"] or ""
        ref["chat_fin"] = j["choices"][0]["finish_reason"]
        p1 = j["usage"]["prompt_tokens"]
        # the same conversation again: the prefix cache serves most of it
        st, _, j = d.post("/v1/chat/completions", body)
        check_chat(st, j, M, max_tokens=10)
        check((j["choices"][0]["message"]["content"] or "") == ref["chat"], "greedy chat differs between runs")
        c = j["usage"]["prompt_tokens_details"]["cached_tokens"]
        check(0 < c < p1, f"cached_tokens {c} on a repeated prompt of {p1} tokens")
        # max_completion_tokens, logprobs
        st, _, j = d.post("/v1/chat/completions", {"messages": msgs, "max_completion_tokens": 4,
                                                   "temperature": 0, "logprobs": True, "top_logprobs": 2})
        check_chat(st, j, M, max_tokens=4)
        lp = j["choices"][0]["logprobs"]
        check(isinstance(lp, dict) and isinstance(lp.get("content"), list) and lp["content"], f"chat logprobs {lp}")
        for e in lp["content"]:
            check(isinstance(e.get("token"), str) and isinstance(e.get("logprob"), float)
                  and isinstance(e.get("bytes"), list) and len(e.get("top_logprobs", [])) == 2,
                  f"chat logprob entry {e}")

    def chat_stream():
        msgs = [{"role": "system", "content": "You are terse."},
                {"role": "user", "content": [{"type": "text", "text": "Name a color."}]}]
        body = {"model": M, "messages": msgs, "max_tokens": 10, "temperature": 0, "stream": True,
                "stream_options": {"include_usage": True}}
        content, reasoning, _, fin, usage, _ = stream_chat(d, body, M)
        check(content == ref["chat"], f"streamed content {content!r} != {ref['chat']!r}")
        check(fin == ref["chat_fin"], f"finish {fin} != {ref['chat_fin']}")
        check_usage(usage, "chat stream usage", 10)
        body.pop("stream_options")
        content, _, _, fin, usage, _ = stream_chat(d, body, M)
        check(usage is None and content == ref["chat"], "chat stream without include_usage")

    tools = [{"type": "function", "function": {
        "name": "get_weather", "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]

    def chat_tools():
        msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
        st, _, plain = d.post("/v1/chat/completions", {"messages": msgs, "max_tokens": 8, "temperature": 0})
        check_chat(st, plain, M, max_tokens=8)
        st, _, j = d.post("/v1/chat/completions", {"messages": msgs, "tools": tools, "tool_choice": "auto",
                                                   "max_tokens": 8, "temperature": 0})
        check_chat(st, j, M, max_tokens=8)
        check(j["usage"]["prompt_tokens"] > plain["usage"]["prompt_tokens"] + 10,
              "the tools did not reach the prompt (prompt_tokens "
              f"{j['usage']['prompt_tokens']} with, {plain['usage']['prompt_tokens']} without)")
        # a tool-call round trip in the history, streamed, with reasoning_effort
        hist = msgs + [
            {"role": "assistant", "content": None, "reasoning_content": "I should call the tool.",
             "tool_calls": [{"id": "call_1", "type": "function",
                             "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp_c\": 21}"}]
        for effort in ("low", "high"):
            st, _, j = d.post("/v1/chat/completions", {"messages": hist, "tools": tools, "max_tokens": 8,
                                                       "temperature": 0, "reasoning_effort": effort})
            check_chat(st, j, M, max_tokens=8)
        content, reasoning, tcs, fin, usage, _ = stream_chat(
            d, {"messages": hist, "tools": tools, "max_tokens": 8, "temperature": 0, "stream": True,
                "reasoning_effort": "medium", "stream_options": {"include_usage": True}}, M)
        check_usage(usage, "chat tools stream", 8)
        for tc in tcs:
            check(isinstance(tc.get("index"), int), f"tool_calls delta without index: {tc}")
        expect_error(d.post("/v1/chat/completions", {"messages": msgs, "reasoning_effort": "extreme"}), 400,
                     "reasoning_effort")
        # tool_choice required / named: the call is forced. <|end|> and <|call|>
        # pulled ahead (logit_bias) so that the random model's reasoning and
        # arguments end soon; even so, nothing but a call can come out
        two = tools + [{"type": "function", "function": {"name": "get_time", "parameters": {}}}]
        pull = {"200007": 30, "200012": 30, "200002": 100, **NO_EOS_CHAT}
        for choice, names in (("required", ("get_weather", "get_time")),
                              ({"type": "function", "function": {"name": "get_time"}}, ("get_time",))):
            for stream in (False, True):
                body = {"messages": msgs, "tools": two, "tool_choice": choice, "max_tokens": 64,
                        "temperature": 0.7, "seed": 5, "logit_bias": pull}
                if stream:
                    content, _, tcs, fin, _, _ = stream_chat(d, {**body, "stream": True}, M)
                    names_seen = [t["function"]["name"] for t in tcs if t.get("function", {}).get("name")]
                else:
                    st, _, j = d.post("/v1/chat/completions", body)
                    check_chat(st, j, M, max_tokens=64)
                    m = j["choices"][0]["message"]
                    fin, content = j["choices"][0]["finish_reason"], m["content"]
                    names_seen = [t["function"]["name"] for t in m.get("tool_calls") or []]
                check(fin == "tool_calls" and len(names_seen) == 1 and names_seen[0] in names
                      and not content, f"tool_choice {choice}: finish {fin}, calls {names_seen}, "
                      f"content {content!r}")
        st, _, j = d.post("/v1/chat/completions", {"messages": msgs, "tools": two, "tool_choice": "none",
                                                   "max_tokens": 4})
        check_chat(st, j, M, max_tokens=4)
        check(j["usage"]["prompt_tokens"] == plain["usage"]["prompt_tokens"],
              "tool_choice none still rendered the tools")

    R = "/v1/responses"

    def check_response(st, j, where, status=("completed", "incomplete")):
        check(st == 200, f"{where}: status {st}: {j}")
        check(j.get("object") == "response" and str(j.get("id", "")).startswith("resp_"),
              f"{where}: not a response: {j}")
        check(j.get("status") in status, f"{where}: status {j.get('status')!r}")
        check(isinstance(j.get("created_at"), int) and j.get("model") == M, f"{where}: head {j}")
        if j["status"] == "incomplete":
            check(j["incomplete_details"] == {"reason": "max_output_tokens"},
                  f"{where}: incomplete_details {j['incomplete_details']}")
        for it in j["output"]:
            check(it.get("type") in ("message", "reasoning", "function_call"), f"{where}: item {it}")
            check(it.get("status") in ("completed", "incomplete"), f"{where}: item status {it}")
            pre = {"message": "msg_", "reasoning": "rs_", "function_call": "fc_"}[it["type"]]
            check(it.get("id", "").startswith(pre), f"{where}: item id {it.get('id')}")
            if it["type"] == "message":
                check(it["role"] == "assistant" and it["content"][0]["type"] == "output_text"
                      and isinstance(it["content"][0]["text"], str), f"{where}: message {it}")
            if it["type"] == "function_call":
                check(it["call_id"].startswith("call_") and isinstance(it["arguments"], str)
                      and it["name"], f"{where}: call {it}")
        u = j.get("usage") or {}
        check(all(isinstance(u.get(k), int) for k in ("input_tokens", "output_tokens", "total_tokens"))
              and u["total_tokens"] == u["input_tokens"] + u["output_tokens"]
              and isinstance(u["input_tokens_details"]["cached_tokens"], int)
              and isinstance(u["output_tokens_details"]["reasoning_tokens"], int), f"{where}: usage {u}")
        return j

    def item_text(it):
        if it["type"] == "function_call":
            return it["arguments"]
        return "".join(p["text"] for p in it["content"])

    def stream_response(body):
        """-> the final response of a streamed /v1/responses, its events checked."""
        s = SSE(d, R, {**body, "stream": True})
        try:
            check_sse_headers(s)
            evs = list(s.typed_events())
        finally:
            s.close()
        check(len(evs) >= 3, f"{len(evs)} events")
        for k, (name, j) in enumerate(evs):
            check(j.get("type") == name, f"event {name!r} with data type {j.get('type')!r}")
            check(j.get("sequence_number") == k, f"sequence_number {j.get('sequence_number')} at {k}")
        check([n for n, _ in evs[:2]] == ["response.created", "response.in_progress"],
              f"first events {[n for n, _ in evs[:2]]}")
        name, last = evs[-1]
        check(name in ("response.completed", "response.incomplete"), f"last event {name}")
        final = last["response"]
        out, deltas, opened = final["output"], {}, []
        for name, j in evs[2:-1]:
            if name == "response.output_item.added":
                check(j["output_index"] == len(opened), f"item {j['output_index']} out of order")
                opened.append(j["item"]["id"])
            elif name.endswith(".delta"):
                check(j["item_id"] == opened[-1], f"a delta for {j['item_id']}, open {opened[-1]}")
                deltas[j["item_id"]] = deltas.get(j["item_id"], "") + j["delta"]
            elif name == "response.output_item.done":
                check(j["item"] == out[j["output_index"]], f"item done {j['item']} != final")
        check(opened == [it["id"] for it in out], f"items announced {opened}, final {out}")
        for it in out:
            check(deltas.get(it["id"], "") == item_text(it), f"deltas of {it['id']} != its text")
        return final

    def responses_plain():
        st, _, j = d.post(R, {"model": M, "input": "What is the capital of France?",
                              "max_output_tokens": 8, "temperature": 0})
        check_response(st, j, "responses")
        check(j["max_output_tokens"] == 8 and j["temperature"] == 0 and j["store"] is True,
              f"echoed fields {j}")
        st, _, g = d.json("GET", f"{R}/{j['id']}")
        check(st == 200 and g == j, f"GET {j['id']}: {st} {g}")
        st, _, dl = d.json("DELETE", f"{R}/{j['id']}")
        check(st == 200 and dl == {"id": j["id"], "object": "response", "deleted": True}, f"DELETE {dl}")
        expect_error(d.json("GET", f"{R}/{j['id']}"), 404, "response_id")
        expect_error(d.json("DELETE", f"{R}/{j['id']}"), 404, "response_id")
        # store: false keeps nothing
        st, _, j = d.post(R, {"input": "Hi", "max_output_tokens": 2, "store": False})
        check_response(st, j, "store false")
        expect_error(d.json("GET", f"{R}/{j['id']}"), 404, "response_id")
        expect_error(d.json("PUT", f"{R}/{j['id']}"), 405)
        # tool_choice required: whatever comes out is reasoning or the call, never a message
        fn = [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]
        for choice in ("required", {"type": "function", "name": "get_weather"}):
            st, _, j = d.post(R, {"input": "Weather?", "tools": fn, "tool_choice": choice,
                                  "max_output_tokens": 24, "temperature": 1.0, "seed": 3})
            check_response(st, j, f"tool_choice {choice}")
            check(all(it["type"] != "message" for it in j["output"]), f"a message despite {choice}: {j['output']}")
            check(j["tool_choice"] == choice, f"tool_choice echo {j['tool_choice']}")
        expect_error(d.json("GET", R), 405)

    def responses_stream():
        body = {"input": [{"role": "user", "content": [{"type": "input_text", "text": "Hello"}]}],
                "max_output_tokens": 12, "temperature": 0}
        final = stream_response(body)
        check_response(200, final, "responses stream")
        st, _, j = d.json("GET", f"{R}/{final['id']}")
        check(st == 200 and j == final, f"the stored response {j} != the stream's {final}")
        st, _, plain = d.post(R, body)
        check([item_text(it) for it in plain["output"]] == [item_text(it) for it in final["output"]],
              "the same request streamed and not gave different items")

    def responses_codex():
        """Codex CLI's shape: instructions, a function tool and a hosted one,
        reasoning effort, the fields it sends that do not apply, streaming;
        the next turn sends the output items back with the tool's output."""
        tools_r = [{"type": "function", "name": "shell", "description": "Run a command",
                    "strict": False, "parameters": {"type": "object", "properties": {
                        "command": {"type": "array", "items": {"type": "string"}}}}},
                   {"type": "web_search"}]
        base = {"model": M, "instructions": "You are a coding agent.", "tools": tools_r,
                "tool_choice": "auto", "parallel_tool_calls": False,
                "reasoning": {"effort": "medium", "summary": "auto"}, "store": False,
                "include": ["reasoning.encrypted_content"], "prompt_cache_key": "abc",
                "service_tier": "auto", "truncation": "disabled", "client_metadata": {"x": "1"},
                "max_output_tokens": 6, "temperature": 0}
        turn1 = [{"type": "message", "role": "user",
                  "content": [{"type": "input_text", "text": "List the files."}]}]
        r1 = stream_response({**base, "input": turn1})
        check_response(200, r1, "codex turn 1")
        check(r1["tools"] == tools_r and r1["instructions"] == base["instructions"]
              and r1["reasoning"]["effort"] == "medium", f"echo {r1}")
        call = {"type": "function_call", "call_id": "call_ls", "name": "shell",
                "arguments": "{\"command\": [\"ls\"]}"}
        turn2 = turn1 + [{"type": "reasoning", "summary": [], "content": [
            {"type": "reasoning_text", "text": "I will run ls."}]}, call,
            {"type": "function_call_output", "call_id": "call_ls", "output": "a.txt\nb.txt"}]
        r2 = stream_response({**base, "input": turn2})
        check_response(200, r2, "codex turn 2")
        check(r2["usage"]["input_tokens"] > r1["usage"]["input_tokens"] + 10,
              f"turn 2's items did not reach the prompt ({r2['usage']} vs {r1['usage']})")
        # the same conversation through previous_response_id
        st, _, a = d.post(R, {"input": "Remember the word teal.", "max_output_tokens": 4})
        check_response(st, a, "first turn")
        st, _, b = d.post(R, {"input": "Which word?", "max_output_tokens": 4,
                              "previous_response_id": a["id"]})
        check_response(st, b, "continued")
        check(b["previous_response_id"] == a["id"], f"previous_response_id echo {b}")
        check(b["usage"]["input_tokens"] > a["usage"]["input_tokens"], "the previous turn was not in the prompt")
        check(b["usage"]["input_tokens_details"]["cached_tokens"] > 0, "the previous turn's prefix was not reused")
        expect_error(d.post(R, {"input": "x", "previous_response_id": "resp_missing"}), 404,
                     "previous_response_id", ("resp_missing",))

    def responses_background():
        # a stream read in part, then resumed after a sequence number: the
        # same events as reading it whole, from the next one on
        body = {"input": "Say hello.", "background": True, "stream": True, "max_output_tokens": 40,
                "temperature": 0, "store": False}
        s = SSE(d, R, body, timeout=T(60))
        check(s.status == 200, f"background stream {s.status}")
        first = []
        for name, j in s.typed_events():
            first.append(j)
            if len(first) == 5:
                break
        s.close()  # the client leaves: the run goes on
        rid = first[0]["response"]["id"]
        check(first[0]["response"]["background"] is True, f"not background: {first[0]}")
        deadline = time.monotonic() + T(30)
        while True:
            st, _, g = d.json("GET", f"{R}/{rid}")
            check(st == 200, f"GET while it runs: {st} {g}")
            if g["status"] not in ("queued", "in_progress"):
                break
            check(time.monotonic() < deadline, f"still {g['status']}")
            time.sleep(0.05)
        check(g["status"] == "incomplete" and g["usage"]["output_tokens"] == 40, f"ended {g}")
        whole = [j for _, j in SSE_GET(d, f"{R}/{rid}?stream=true").typed_events()]
        rest = [j for _, j in SSE_GET(d, f"{R}/{rid}?stream=true&starting_after=4").typed_events()]
        check([j["sequence_number"] for j in whole] == list(range(len(whole))), "sequence numbers")
        check(whole[:5] == first, "the stream read again differs from the first reading")
        check(rest == whole[5:], f"resumed after 4: {len(rest)} events, want {len(whole) - 5}")
        check(whole[-1]["type"] == "response.incomplete", f"last event {whole[-1]['type']}")
        expect_error(d.json("GET", f"{R}/{rid}?stream=true&starting_after={len(whole) + 3}"), 400,
                     "starting_after")
        # stored though store was false; input_items; the methods of each path
        st, _, items = d.json("GET", f"{R}/{rid}/input_items")
        check(st == 200 and items["object"] == "list" and items["data"][0]["role"] == "user",
              f"input_items {st} {items}")
        expect_error(d.post(f"{R}/{rid}", {}), 405)
        expect_error(d.json("GET", f"{R}/{rid}/cancel"), 405)
        expect_error(d.post(f"{R}/nope/cancel", {}), 404)
        st, _, r = d.post(R, {"input": "x", "max_output_tokens": 2})
        expect_error(d.post(f"{R}/{r['id']}/cancel", {}), 400, "response_id", ("background",))
        expect_error(d.json("GET", f"{R}/{r['id']}?stream=true"), 400, "stream")

    def responses_errors():
        expect_error(d.post(R, {}), 400, "input")
        expect_error(d.post(R, {"input": [{"role": "user", "content": [{"type": "input_image"}]}]}),
                     400, "input[0].content[0].type", ("input_image",))
        expect_error(d.post(R, {"input": "x", "text": {"format": {"type": "json_schema"}}}), 400,
                     "text.format.schema")
        expect_error(d.post(R, {"input": "x", "text": {"format": {"type": "xml"}}}), 400,
                     "text.format")
        expect_error(d.post(R, {"input": "x", "tool_choice": {"type": "function", "name": "nope"}}),
                     400, "tool_choice", ("nope",))
        expect_error(d.post(R, {"input": "x", "reasoning": {"effort": "extreme"}}), 400, "reasoning.effort")
        expect_error(d.post(R, {"input": "x", "max_output_tokens": 0}), 400, "max_output_tokens")
        expect_error(d.post(R, {"input": "x", "model": "other"}), 404, "model")
        # a prompt over the context: context_length_exceeded, as Codex expects
        e = expect_error(d.post(R, {"input": "word " * 9000}), 400)
        check(e["code"] == "context_length_exceeded", f"code {e['code']!r}")

    def tokenize_roundtrip():
        for text in ["Hello, world!", "naïve café — 東京 🚀 \u00e9\u0301", "  spaces\tand\nnewlines  ",
                     "<|start|>user<|message|>hi<|end|>"]:
            st, _, j = d.post("/tokenize", {"model": M, "prompt": text})
            check(st == 200 and isinstance(j.get("tokens"), list) and j["count"] == len(j["tokens"]),
                  f"/tokenize {st} {j}")
            check(j.get("max_model_len") == 8192, f"max_model_len {j.get('max_model_len')}")
            st, _, back = d.post("/detokenize", {"model": M, "tokens": j["tokens"]})
            check(st == 200 and back.get("prompt") == text, f"/detokenize gave {back} for {text!r}")
        # special tokens count only when asked
        plain = d.post("/tokenize", {"prompt": "<|start|>"})[2]["tokens"]
        special = d.post("/tokenize", {"prompt": "<|start|>", "add_special_tokens": True})[2]["tokens"]
        check(len(plain) > 1 and special == [200006], f"<|start|>: {plain} as text, {special} as special")
        # "text" is accepted for "prompt"
        st, _, j = d.post("/tokenize", {"text": "Hello"})
        check(st == 200 and j["count"] >= 1, f"/tokenize with text: {st} {j}")
        # errors
        expect_error(d.post("/tokenize", {"prompt": 5}), 400, "prompt")
        expect_error(d.post("/tokenize", {}), 400, "prompt")
        expect_error(d.post("/detokenize", {"tokens": "abc"}), 400, "tokens")
        expect_error(d.post("/detokenize", {"tokens": [1, 10 ** 7]}), 400, "tokens")
        expect_error(d.post("/detokenize", {"tokens": [1.5]}), 400, "tokens")
        expect_error(d.post("/tokenize", {"model": "nope", "prompt": "x"}), 404, "model")
        # a conversation, as chat renders it: the count chat's usage gives
        tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
        conv = {"messages": [{"role": "system", "content": "Be brief."},
                             {"role": "user", "content": "Hello"}], "tools": tools,
                "reasoning_effort": "high"}
        st, _, j = d.post("/tokenize", conv)
        check(st == 200 and j["count"] == len(j["tokens"]) and 200006 in j["tokens"], f"{st} {j}")
        st, _, c = d.post("/v1/chat/completions", {**conv, "max_tokens": 1})
        check(st == 200 and c["usage"]["prompt_tokens"] == j["count"],
              f"/tokenize counts {j['count']}, chat's prompt {c['usage']}")
        expect_error(d.post("/tokenize", {"messages": [{"role": "user"}]}), 400, "messages[0].content")
        # a Responses body's input tokens, before sending it
        body = {"input": "Hello", "instructions": "Be brief.", "tools": [dict(type="function", name="f",
                                                                             parameters={"type": "object"})]}
        st, _, j = d.post("/v1/responses/input_tokens", body)
        check(st == 200 and j.get("object") == "response.input_tokens", f"input_tokens: {st} {j}")
        st, _, r = d.post("/v1/responses", {**body, "max_output_tokens": 1, "store": False})
        check(st == 200 and r["usage"]["input_tokens"] == j["input_tokens"],
              f"input_tokens {j['input_tokens']}, the response's {r['usage']}")
        expect_error(d.post("/v1/responses/input_tokens", {"input": 5}), 400, "input")

    def errors_400():
        C, CH = "/v1/completions", "/v1/chat/completions"
        msgs = [{"role": "user", "content": "hi"}]
        # invalid JSON, not an object
        for raw in (b"{bad json", b"", b"[1, 2]", b"\"str\"", b"{\"prompt\": \"x\",}"):
            st, hd, data = d.request("POST", C, raw, {"Content-Type": "application/json"})
            expect_error((st, hd, json.loads(data)), 400)
        st, hd, data = d.request("POST", CH, b"{\"messages\": [", {"Content-Type": "application/json"})
        expect_error((st, hd, json.loads(data)), 400)
        # wrong types
        for body, param in [
                ({"prompt": "x", "max_tokens": "8"}, "max_tokens"),
                ({"prompt": "x", "max_tokens": 2.5}, "max_tokens"),
                ({"prompt": "x", "temperature": "hot"}, "temperature"),
                ({"prompt": "x", "stream": "yes"}, "stream"),
                ({"prompt": "x", "echo": 1}, "echo"),
                ({"prompt": "x", "n": "2"}, "n"),
                ({"prompt": "x", "stop": 5}, "stop"),
                ({"prompt": "x", "stop": [1]}, "stop[0]"),
                ({"prompt": "x", "logit_bias": [1]}, "logit_bias"),
                ({"prompt": "x", "seed": "s"}, "seed"),
                ({"prompt": "x", "model": 5}, "model"),
                ({"prompt": 5}, "prompt"),
                ({"prompt": [1, "a"]}, "prompt[1]"),
                ({"prompt": [[1], 2]}, "prompt[1]"),
                ({"prompt": [1, 2.5]}, "prompt[1]"),
                ({"prompt": []}, "prompt"),
                ({"prompt": ""}, "prompt"),
                ({"max_tokens": 4}, "prompt"),
                ({"prompt": [201088]}, "prompt[0]"),
                ({"prompt": [-1]}, "prompt[0]")]:
            expect_error(d.post(C, body), 400, param)
        for body, param in [
                ({"messages": "hi"}, "messages"),
                ({"messages": []}, "messages"),
                ({"messages": [{"content": "no role"}]}, "messages[0].role"),
                ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
                ({"messages": msgs, "tools": {"a": 1}}, "tools"),
                ({"messages": msgs, "tools": [{"type": "function", "function": {}}]}, "tools[0].function.name"),
                ({"messages": msgs, "logprobs": 1}, "logprobs"),
                ({"messages": msgs, "top_logprobs": 2}, "top_logprobs"),
                ({"messages": msgs, "max_completion_tokens": "x"}, "max_completion_tokens")]:
            expect_error(d.post(CH, body), 400, param)
        # fields by their JSON path, with OpenAI's code (issue 23's cases among them)
        for body, param, code in [
                ({"messages": [{"role": "user"}]}, "messages[0].content", "missing_required_parameter"),
                ({"messages": [{"role": "user", "content": None}]}, "messages[0].content", "invalid_type"),
                ({"messages": msgs + [{"role": "assistant", "tool_calls": "x"}]}, "messages[1].tool_calls",
                 "invalid_type"),
                ({"messages": msgs, "tools": [{"type": "banana", "function": {"name": "f"}}]}, "tools[0].type",
                 "invalid_value"),
                ({"messages": msgs, "tools": [{"type": "function", "function": {"name": "f", "parameters": []}}]},
                 "tools[0].function.parameters", "invalid_function_parameters")]:
            e = expect_error(d.post(CH, body), 400, param, (param,))
            check(e["code"] == code, f"code {e['code']!r}, want {code!r}")
        # out of range
        for body, param in [
                ({"max_tokens": -1}, "max_tokens"),
                ({"temperature": -0.1}, "temperature"),
                ({"temperature": 1e9}, "temperature"),
                ({"logprobs": 21}, "logprobs"),
                ({"logprobs": -1}, "logprobs"),
                ({"n": 0}, "n"),
                ({"n": -3}, "n"),
                ({"n": 17}, "n"),
                ({"top_p": 1.5}, "top_p"),
                ({"top_k": -2}, "top_k"),
                ({"presence_penalty": 3}, "presence_penalty"),
                ({"frequency_penalty": -2.5}, "frequency_penalty"),
                ({"logit_bias": {"300000": 1}}, "logit_bias"),
                ({"logit_bias": {"5": 101}}, "logit_bias"),
                ({"stop": ["a"] * 17}, "stop"),
                ({"max_tokens": 0}, "max_tokens")]:       # 0 only with echo
            expect_error(d.post(C, {"prompt": "x", **body}), 400, param)
        expect_error(d.post(CH, {"messages": msgs, "max_tokens": -5}), 400, "max_tokens")
        expect_error(d.post(CH, {"messages": msgs, "temperature": -1}), 400, "temperature")
        expect_error(d.post(CH, {"messages": msgs, "top_logprobs": 21, "logprobs": True}), 400, "top_logprobs")
        expect_error(d.post(CH, {"messages": msgs, "n": 0}), 400, "n")
        # prompt + max_tokens over the context: the message gives both numbers
        ids = list(range(100, 160))
        e = expect_error(d.post(C, {"prompt": ids, "max_tokens": 8150}), 400, needles=("60", "8150", "8192"))
        expect_error(d.post(C, {"prompt": list(range(1, 8200)), "max_tokens": 1}), 400,
                     needles=("8199", "8192"))
        st, _, j = d.post(CH, {"messages": msgs, "max_tokens": 4})
        check_chat(st, j, M, max_tokens=4)
        pt = j["usage"]["prompt_tokens"]
        expect_error(d.post(CH, {"messages": msgs, "max_tokens": 8192}), 400, needles=(str(pt), "8192"))
        # exactly the context: accepted (an eos forced by logit_bias ends it at once)
        force_eos = {k: 100 for k in NO_EOS_CHAT}
        st, _, j = d.post(C, {"prompt": ids, "max_tokens": 8192 - 60, "temperature": 0, "logit_bias": force_eos})
        check_completion(st, j, M, 1, 8192 - 60)
        check(j["choices"][0]["finish_reason"] == "stop", f"eos forced: {j['choices'][0]}")
        # the error names the field for each request; non-streamed and streamed alike
        expect_error(d.post(C, {"prompt": "x", "max_tokens": -1, "stream": True}), 400, "max_tokens")
        _ = e

    def errors_404_405():
        for method, path in [("GET", "/"), ("GET", "/v1"), ("POST", "/v1/complete"), ("GET", "/v2/models"),
                             ("POST", "/v1/embeddings"), ("GET", "/healthz"), ("GET", "/v1/completions/x")]:
            expect_error(d.json(method, path), 404)
        expect_error(d.json("GET", "/v1/models/no-such-model"), 404, "model", needles=("no-such-model",))
        expect_error(d.post("/v1/completions", {"model": "no-such-model", "prompt": "x"}), 404, "model",
                     needles=("no-such-model",))
        expect_error(d.post("/v1/chat/completions", {"model": "no-such-model",
                                                     "messages": [{"role": "user", "content": "x"}]}),
                     404, "model")
        for method, path, allow in [("GET", "/v1/completions", "POST"), ("GET", "/v1/chat/completions", "POST"),
                                    ("PUT", "/v1/completions", "POST"), ("DELETE", "/v1/chat/completions", "POST"),
                                    ("POST", "/v1/models", "GET"), ("DELETE", f"/v1/models/{M}", "GET"),
                                    ("POST", "/health", "GET"), ("POST", "/live", "GET"),
                                    ("POST", "/metrics", "GET"), ("GET", "/tokenize", "POST"),
                                    ("GET", "/detokenize", "POST")]:
            st, hd, data = d.request(method, path, b"{}" if method in ("POST", "PUT") else None,
                                     {"Content-Type": "application/json"})
            check(st == 405, f"{method} {path}: {st}, want 405")
            check(allow in hd.get("allow", ""), f"{method} {path}: Allow {hd.get('allow')!r}, want {allow}")
            try:
                j = json.loads(data)
            except ValueError:
                raise AssertionError(f"{method} {path}: the 405 body is not the error envelope: {data[:200]!r}")
            expect_error((st, hd, j), 405)

    def keepalive_connection():
        # several requests, errors among them, on one HTTP/1.1 connection
        c = d.conn()
        try:
            for i in range(3):
                st, _, j = d.post("/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 2}, conn=c)
                check(st == 200, f"request {i} on a kept-alive connection: {st}")
                expect_error(d.post("/v1/completions", {"prompt": "x", "n": 0}, conn=c), 400, "n")
                st, _, j = d.json("GET", "/health", conn=c)
                check(st == 200, f"/health on a kept-alive connection: {st}")
                expect_error(d.json("GET", "/nope", conn=c), 404)
        finally:
            c.close()

    def cancel_on_disconnect():
        def cancelled():
            return metric(d.metrics(), "moeserve:request_success_total", finished_reason="cancelled")

        def wait_idle(before, what):
            deadline = time.monotonic() + T(5)
            while True:
                ms = d.metrics()
                run = metric(ms, "moeserve:num_requests_running")
                wait = metric(ms, "moeserve:num_requests_waiting")
                c = metric(ms, "moeserve:request_success_total", finished_reason="cancelled")
                if run == 0 and wait == 0 and c >= before + 1:
                    return time.monotonic()
                if time.monotonic() > deadline:
                    raise AssertionError(f"{what}: {T(5):.0f} s after the disconnect: running {run}, "
                                         f"waiting {wait}, cancelled {c} (before {before})")
                time.sleep(0.05)

        def stream_then_leave(path, body, marker):
            """POST body to path streamed, read up to its first event, hang up."""
            body = json.dumps(body).encode()
            s = socket.create_connection(("127.0.0.1", d.port), timeout=T(30))
            s.sendall(b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Type: "
                      b"application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            got = b""
            while marker not in got:
                chunk = s.recv(4096)
                check(chunk, f"{path}: the stream closed before its first event: {got[:300]!r}")
                got += chunk
            check(b" 200 " in got.split(b"\r\n", 1)[0], f"status line {got[:100]!r}")
            s.close()
            return time.monotonic()

        before = cancelled()
        gen0 = metric(d.metrics(), "moeserve:generation_tokens_total")
        t_close = stream_then_leave("/v1/completions", {
            "prompt": P, "max_tokens": 8000, "temperature": 0, "stream": True,
            "logit_bias": NO_EOS_CHAT}, b"data: {")
        t_idle = wait_idle(before, "streamed")
        gen1 = metric(d.metrics(), "moeserve:generation_tokens_total")
        check(gen1 - gen0 < 4000, f"{gen1 - gen0} tokens generated for a request cancelled at once")
        print(f"     streamed request cancelled {t_idle - t_close:.2f} s after the disconnect")
        # the Responses API's stream: the same
        before = cancelled()
        stream_then_leave("/v1/responses", {"input": P, "max_output_tokens": 8000, "temperature": 0,
                                            "stream": True}, b"response.created")
        wait_idle(before, "responses streamed")
        # not streamed: the client leaves while it waits for the whole answer
        before = cancelled()
        body = json.dumps({"prompt": P, "max_tokens": 8000, "temperature": 0, "logit_bias": NO_EOS_CHAT}).encode()
        s = socket.create_connection(("127.0.0.1", d.port), timeout=T(30))
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body) + body)
        d.wait_running(1, "the request never ran")
        s.close()
        wait_idle(before, "not streamed")
        # the daemon serves on
        st, _, j = d.post("/v1/completions", {"prompt": P, "max_tokens": 12, "temperature": 0})
        check_completion(st, j, M, 1, 12)
        check(j["choices"][0]["text"] == ref["P"], "a completion after the cancellations differs")

    def concurrent_clients():
        prompts = [P, "Hello, world", [1, 2, 3, 4, 5], "Tell me a story"]
        want = {}
        for i, p in enumerate(prompts):
            st, _, j = d.post("/v1/completions", {"prompt": p, "max_tokens": 8, "temperature": 0})
            check_completion(st, j, M, 1, 8)
            want[i] = (j["choices"][0]["text"], j["usage"]["completion_tokens"])

        def client(k):
            i = k % len(prompts)
            body = {"prompt": prompts[i], "max_tokens": 8, "temperature": 0}
            if k % 2:
                texts, fins, usage, _, _ = stream_completion(
                    d, {**body, "stream": True, "stream_options": {"include_usage": True}}, M)
                return i, 200, texts[0], usage["completion_tokens"]
            st, _, j = d.post("/v1/completions", body, timeout=T(120))
            check_completion(st, j, M, 1, 8)
            return i, st, j["choices"][0]["text"], j["usage"]["completion_tokens"]

        t0 = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(16) as ex:
            res = list(ex.map(client, range(16)))
        dt = time.monotonic() - t0
        bad = [(i, st, txt) for i, st, txt, n in res if st != 200 or (txt, n) != want[i]]
        check(not bad, f"{len(bad)} of 16 concurrent clients wrong: {bad[:3]}")
        # chat concurrently too
        msgs = [{"role": "user", "content": "Count to three."}]
        st, _, one = d.post("/v1/chat/completions", {"messages": msgs, "max_tokens": 8, "temperature": 0})
        check_chat(st, one, M, max_tokens=8)

        def chat_client(k):
            st, _, j = d.post("/v1/chat/completions", {"messages": msgs, "max_tokens": 8, "temperature": 0},
                              timeout=T(120))
            check_chat(st, j, M, max_tokens=8)
            return j["choices"][0]["message"]["content"]

        with concurrent.futures.ThreadPoolExecutor(8) as ex:
            outs = list(ex.map(chat_client, range(8)))
        check(all(o == one["choices"][0]["message"]["content"] for o in outs), "concurrent chats differ")
        print(f"     16 concurrent completions in {dt:.2f} s")

    def metrics_after():
        deadline = time.monotonic() + T(5)
        while metric(d.metrics(), "moeserve:num_requests_running") and time.monotonic() < deadline:
            time.sleep(0.02)  # (the gauge may trail the last response by a step)
        ms = d.metrics()
        check(metric(ms, "moeserve:request_success_total", finished_reason="length") > 0, "no length finishes")
        check(metric(ms, "moeserve:http_requests_total", status="400") > 0, "400s not counted")
        check(metric(ms, "moeserve:http_requests_total", status="404") > 0, "404s not counted")
        check(metric(ms, "moeserve:generation_tokens_total") > 100, "generation tokens not counted")
        check(metric(ms, "moeserve:prompt_tokens_cached_total") > 0, "prefix-cache hits not counted")
        check(metric(ms, "moeserve:num_requests_running") == 0, "requests still running")
        # speculative decoding (on by default): positions 0..k each once, adding
        # up to the accepted tokens, which the drafted ones bound; the shared
        # cache within --spec-cache-bytes' default
        pos = sorted(int(dict(ls)["position"]) for n, ls in ms
                     if n == "moeserve:spec_decode_num_accepted_tokens_per_pos_total")
        check(pos == list(range(len(pos))) and pos, f"positions {pos}")
        acc = metric(ms, "moeserve:spec_decode_num_accepted_tokens_total")
        check(metric(ms, "moeserve:spec_decode_num_accepted_tokens_per_pos_total") == acc,
              "per-position counts do not add up to the accepted tokens")
        check(acc <= metric(ms, "moeserve:spec_decode_num_draft_tokens_total"), "more accepted than drafted")
        check(0 < metric(ms, "moeserve:spec_decode_cache_bytes") <= 64 << 20, "shared cache size")
        check(metric(ms, "moeserve:spec_decode_index_bytes") == 0, "indexes held with nothing running")

    cases = [
        ("chat: /health /live /v1/models /metrics", endpoints),
        ("chat: completion, prompt a string; usage", completion_string),
        ("chat: completion, prompt a list of strings (each as alone)", completion_list_of_strings),
        ("chat: completion, prompt token ids and lists of them", completion_tokens),
        ("chat: completion n>1", completion_n),
        ("chat: echo + logprobs + max_tokens 0/1 (lm-eval shape)", echo_logprobs),
        ("chat: stop strings (plain and streamed)", stop_strings),
        ("chat: min_tokens, ignore_eos; best_of, suffix, chat echo refused", eos_controls),
        ("chat: completion streams parsed chunk by chunk", stream_cmpl),
        ("chat: chat completion, not streamed (prefix cache in usage, logprobs)", chat_plain),
        ("chat: chat completion streamed (role first, finish, usage, [DONE])", chat_stream),
        ("chat: tools, tool-call history, reasoning_effort", chat_tools),
        ("responses: not streamed; GET, DELETE, store false", responses_plain),
        ("responses: streamed, every event's type and sequence, deltas = items", responses_stream),
        ("responses: a Codex-shaped conversation; previous_response_id", responses_codex),
        ("responses: background: stream read, left, resumed; polled; input_items", responses_background),
        ("responses: refusals name the field; context_length_exceeded", responses_errors),
        ("chat: /tokenize (text, a conversation) + /detokenize; responses input_tokens", tokenize_roundtrip),
        ("chat: 400 invalid JSON, wrong types, out of range, over the context", errors_400),
        ("chat: 404 unknown route or model, 405 wrong method", errors_404_405),
        ("chat: requests and errors on one kept-alive connection", keepalive_connection),
        ("chat: cancellation on disconnect (streamed and not; a responses stream)", cancel_on_disconnect),
        ("chat: 16 concurrent clients, 8 concurrent chats, all correct", concurrent_clients),
        ("chat: /metrics counted all of it", metrics_after),
    ]
    for name, fn in cases:
        case(name, fn, daemon=d)
    if sdk:
        case("chat: the openai npm SDK against this daemon", sdk, d, M, daemon=d)


# ---------------------------------------------------------------------------
# the other daemons

def broken_cases(d):
    def stays_503():
        d.wait_listening()
        # the load fails within milliseconds, but a first probe may still
        # come before it: wait (bounded) until the daemon is past "loading"
        deadline = time.time() + 20
        while time.time() < deadline:
            st, hd, j = d.json("GET", "/health")
            if isinstance(j, dict) and j.get("status") != "loading":
                break
            time.sleep(0.05)
        for i in range(5):
            st, hd, j = d.json("GET", "/health")
            check(st == 503, f"/health of a broken model: {st} {j}")
            check(isinstance(j, dict) and j.get("status") == "failed", f"/health body {j}")
            check("num_hidden_layers" in j.get("reason", "") and "config.json" in j["reason"],
                  f"the reason does not name the problem: {j.get('reason')!r}")
            st, _, j = d.json("GET", "/live")
            check(st == 200 and j.get("status") == "alive", f"/live {st} {j}")
            time.sleep(0.1)
        e = expect_error(d.json("GET", "/v1/models"), 503)
        check("num_hidden_layers" in e["message"], f"the 503 does not say why: {e['message']}")
        expect_error(d.post("/v1/completions", {"prompt": [1, 2], "max_tokens": 2}), 503)
        check(metric(d.metrics(), "moeserve:model_loaded") == 0, "model_loaded is not 0")
        check(d.proc.poll() is None, "the daemon exited instead of saying why on /health")

    case("broken: /health 503 naming the bad config field, /live 200, /v1 503", stays_503, daemon=d)


def auth_cases(d):
    KEY = "s3cret-key"
    A = {"Authorization": f"Bearer {KEY}"}
    body = {"prompt": [1, 2, 3], "max_tokens": 3, "temperature": 0}

    def auth():
        for hdr in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Bearer {KEY}x"},
                    {"Authorization": f"Bearer {KEY[:-1]}"}, {"Authorization": KEY},
                    {"Authorization": f"Basic {KEY}"}, {"Authorization": "Bearer "}):
            st, hd, j = d.post("/v1/completions", body, headers=hdr)
            expect_error((st, hd, j), 401, type_="authentication_error")
            check("bearer" in hd.get("www-authenticate", "").lower(), f"401 without WWW-Authenticate: {hd}")
        expect_error(d.json("GET", "/v1/models"), 401)
        expect_error(d.json("GET", "/v1/models", headers={"Authorization": "Bearer nope"}), 401)
        expect_error(d.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]}), 401)
        expect_error(d.post("/tokenize", {"prompt": "x"}), 401)
        st, _, j = d.post("/v1/completions", body, headers=A)
        check_completion(st, j, TOKEN_MODEL, 1, 3)
        st, _, j = d.json("GET", "/v1/models", headers=A)
        check(st == 200 and j["data"][0]["id"] == TOKEN_MODEL, f"/v1/models with the key: {st} {j}")
        # the token-only model: string prompts and chat are refused clearly
        expect_error(d.post("/v1/completions", {"prompt": "text"}, headers=A), 400, "prompt",
                     needles=("tokenizer",))
        expect_error(d.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]},
                            headers=A), 400, needles=("tokenizer",))
        # open without the key
        for path in ("/health", "/live", "/metrics"):
            st, _, _ = d.request("GET", path)
            check(st == 200, f"{path} without the key: {st}")
        # unknown routes are 404 with or without the key
        expect_error(d.json("GET", "/v1/nothing"), 404)

    def body_limit():
        big = {"prompt": [1, 2, 3], "max_tokens": 1, "user": "x" * 4096}
        expect_error(d.post("/v1/completions", big, headers=A), 413, needles=("2048",))
        expect_error(d.post("/v1/chat/completions", big, headers=A), 413)
        # no Content-Length: a chunked upload over the limit
        c = d.conn()
        try:
            data = json.dumps(big).encode()
            c.request("POST", "/v1/completions", body=iter([data[:1000], data[1000:3000], data[3000:]]),
                      headers={**A, "Content-Type": "application/json"}, encode_chunked=True)
            r = c.getresponse()
            j = json.loads(r.read())
            expect_error((r.status, {k.lower(): v for k, v in r.getheaders()}, j), 413)
        finally:
            c.close()
        # just under the limit is fine
        small = {"prompt": [1, 2, 3], "max_tokens": 1, "user": ""}
        small["user"] = "x" * (2048 - len(json.dumps(small)))
        check(len(json.dumps(small)) == 2048, "test bug: body size")
        st, _, j = d.post("/v1/completions", small, headers=A)
        check_completion(st, j, TOKEN_MODEL, 1, 1)

    def cors():
        st, hd, _ = d.request("OPTIONS", "/v1/completions",
                              headers={"Origin": "https://app.example", "Access-Control-Request-Method": "POST"})
        check(st in (200, 204), f"preflight {st}")
        check(hd.get("access-control-allow-origin") == "https://app.example", f"preflight headers {hd}")
        check("authorization" in hd.get("access-control-allow-headers", "").lower(), f"allow-headers {hd}")
        st, hd, _ = d.post("/v1/completions", body, headers={**A, "Origin": "https://app.example"})
        check(st == 200 and hd.get("access-control-allow-origin") == "https://app.example",
              f"no CORS header on a 200: {hd}")
        st, hd, _ = d.post("/v1/completions", body, headers={"Origin": "https://app.example"})
        check(st == 401 and hd.get("access-control-allow-origin") == "https://app.example",
              f"no CORS header on a 401: {hd}")

    def request_ids():
        # the client's id, kept; none, or one that is not visible ASCII of at
        # most 128 bytes: one made (32 hex digits), another each time
        for rid in ("trace-42/abc.DEF_9", "x" * 128):
            st, hd, _ = d.post("/v1/completions", body, headers={**A, "X-Request-Id": rid})
            check(st == 200 and hd.get("x-request-id") == rid, f"{rid[:20]}: {st} {hd}")
        made = set()
        for hdr in ({}, {"X-Request-Id": "has space"}, {"X-Request-Id": "x" * 129},
                    {"X-Request-Id": 'q"uote'}):
            st, hd, _ = d.post("/v1/completions", body, headers={**A, **hdr})
            rid = hd.get("x-request-id", "")
            check(st == 200 and re.fullmatch(r"[0-9a-f]{32}", rid), f"{hdr}: {st} {hd}")
            made.add(rid)
        check(len(made) == 4, f"made ids repeat: {made}")
        st, hd, _ = d.post("/v1/completions", body, headers={"X-Request-Id": "on-a-401"})
        check(st == 401 and hd.get("x-request-id") == "on-a-401", f"a 401's headers {hd}")

    def json_logs():
        with open(d.log_path, "rb") as f:
            lines = [ln for ln in f.read().decode(errors="replace").splitlines() if ln.startswith("{")]
        check(len(lines) >= 10, f"{len(lines)} JSON log lines")
        for ln in lines:
            j = json.loads(ln)
            check({"time", "method", "path", "status", "request_id"} <= set(j), f"log line {ln}")
            check(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", j["time"]),
                  f"time {j['time']!r} is not ISO 8601 UTC")
        check(any(json.loads(ln)["status"] == 401 for ln in lines), "no 401 in the log")
        ids = {json.loads(ln)["request_id"] for ln in lines}
        check({"trace-42/abc.DEF_9", "on-a-401"} <= ids, "the clients' request ids are not in the log")

    case("auth: 401 without or with a wrong key, 200 with it; health/live/metrics open", auth, daemon=d)
    case("auth: 413 over --max-body-bytes (Content-Length and chunked)", body_limit, daemon=d)
    case("auth: CORS preflight and headers", cors, daemon=d)
    def default_context():
        # the model's own context, and the start-up line says so with the pool
        with open(os.path.join(d.model, "config.json")) as f:
            want = json.load(f)["max_position_embeddings"]
        st, _, j = d.json("GET", "/v1/models", headers=A)
        check(st == 200 and j["data"][0]["max_model_len"] == want, f"/v1/models {j}, want {want}")
        with open(d.log_path, "rb") as f:
            log = f.read().decode(errors="replace")
        check(f"context {want} tokens (the model's); KV pool " in log, f"the start-up line:\n{log[-800:]}")

    case("auth: X-Request-Id taken or made, on every answer", request_ids, daemon=d)
    case("auth: the model's context by default, said at start-up", default_context, daemon=d)
    case("auth: --log-format json access log, with time and request id", json_logs, daemon=d)


def queue_cases(d):
    def queue_full():
        n_req, max_tokens = 8, tokens_for(d, 1.0)
        d.wait_idle()  # the burst alone decides what is served and refused

        def one(k):
            body = {"prompt": [1 + k, 2, 3], "max_tokens": max_tokens, "temperature": 0, "logit_bias": NO_EOS}
            if k % 4 == 3:
                s = SSE(d, "/v1/completions", {**body, "stream": True}, timeout=T(120))
                try:
                    if s.status != 200:
                        j = json.loads(s.r.read())
                        return s.status, s.headers, j
                    n = sum(1 for _ in s.events())
                    return 200, s.headers, {"chunks": n}
                finally:
                    s.close()
            return d.post("/v1/completions", body, timeout=T(120))

        with concurrent.futures.ThreadPoolExecutor(n_req) as ex:
            res = list(ex.map(one, range(n_req)))
        codes = [r[0] for r in res]
        check(all(c in (200, 429, 503) for c in codes), f"statuses {codes}")
        check(codes.count(200) >= 1, f"nothing served: {codes}")
        check(codes.count(200) <= 2 + 2, f"more served than running + queued allow: {codes}")
        check(sum(c in (429, 503) for c in codes) >= 1, f"no request refused with a full queue: {codes}")
        for st, hd, j in res:
            if st == 200 and "choices" in j:
                check_completion(st, j, TOKEN_MODEL, 1, max_tokens)
            elif st != 200:
                e = expect_error((st, hd, j), st)
                check("queue" in e["message"], f"the refusal does not say the queue is full: {e['message']}")
        print(f"     statuses {codes}")
        # the daemon is fine afterwards
        check(d.proc.poll() is None, "the daemon died")
        st, _, j = d.json("GET", "/health")
        check(st == 200, f"/health after the burst: {st}")
        st, _, j = d.post("/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 4})
        check_completion(st, j, TOKEN_MODEL, 1, 4)
        ms = d.metrics()
        check(metric(ms, "moeserve:http_requests_total", status="429")
              + metric(ms, "moeserve:http_requests_total", status="503") >= 1, "refusals not counted")

    def keepalive_comments():
        # a stream queued behind a running request gets SSE comments every
        # --keepalive-s (1 s) while it waits, then its chunks as usual
        # sized for ~6 s: the calibration can underestimate the speed by 2x
        # (a short request pays its fixed costs), and the check needs > 1 s
        long = {"prompt": [9, 9, 9], "max_tokens": tokens_for(d, 6.0, hi=12000), "temperature": 0, "logit_bias": NO_EOS}
        out = {}
        # from an idle daemon, so that "1 running, none waiting" is the long
        # request: a calibration request the gauge still counts, with the
        # long one in the queue's one place, got the stream a 429
        d.wait_idle()
        t = threading.Thread(target=lambda: out.update(r=d.post("/v1/completions", long, timeout=T(120))))
        t.start()
        d.wait_running(1, "the long request never ran")
        s = SSE(d, "/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 4, "stream": True, "logprobs": 0},
                timeout=T(120))
        try:
            check_sse_headers(s)
            n = sum(1 for _ in s.events())
        finally:
            s.close()
        t.join(T(120))
        check(n >= 2, f"{n} chunks")
        check(s.comments >= 1, f"no keep-alive comment while queued behind a {long['max_tokens']}-token request")
        st, _, j = out["r"]
        check_completion(st, j, TOKEN_MODEL, 1, long["max_tokens"])
        print(f"     {s.comments} keep-alive comments while queued")

    case("queue: --max-running 1 --max-queue 1: 429/503 with Retry-After, daemon alive", queue_full, daemon=d)
    case("queue: SSE keep-alive comments (--keepalive-s 1) while a stream waits", keepalive_comments, daemon=d)


def sigterm_cases(d):
    def during_requests():
        max_tokens = tokens_for(d, 1.5)
        out = {}

        def plain():
            out["plain"] = d.post("/v1/completions", {"prompt": [1, 2, 3], "max_tokens": max_tokens,
                                                      "logit_bias": NO_EOS,
                                                      "temperature": 0}, timeout=T(120))

        def streamed():
            out["stream"] = stream_completion(d, {"prompt": [4, 5, 6], "max_tokens": max_tokens,
                                                  "logit_bias": NO_EOS,
                                                  "temperature": 0, "stream": True,
                                                  "stream_options": {"include_usage": True}},
                                              TOKEN_MODEL)

        ths = [threading.Thread(target=plain), threading.Thread(target=streamed)]
        d.wait_idle()  # the calibration's requests gone: the two running are these
        for t in ths:
            t.start()
        d.wait_running(2, "the requests never ran")
        d.signal(signal.SIGTERM)
        t_sig = time.monotonic()
        # once the daemon says it is stopping it is draining: not ready
        # (/health 503 "draining"), alive (/live 200), new work refused with
        # 503 and Retry-After (a balancer sends it elsewhere), while the
        # running requests go on
        deadline = time.monotonic() + T(5)
        while b"stopping" not in open(d.log_path, "rb").read():
            check(time.monotonic() < deadline, "the daemon never logged that it is stopping")
            time.sleep(0.01)
        time.sleep(0.05)
        draining = d.proc.poll() is None and all(t.is_alive() for t in ths)
        health, live = d.json("GET", "/health"), d.json("GET", "/live")
        refused = d.post("/v1/completions", {"prompt": [1], "max_tokens": 1})
        for t in ths:
            t.join(T(60))
        rc = d.wait_exit(T(30))
        check(rc == 0, f"exit status {rc} after SIGTERM, want 0")
        check("plain" in out, "the running request got no answer")
        st, _, j = out["plain"]
        check_completion(st, j, TOKEN_MODEL, 1, max_tokens)
        check(j["usage"]["completion_tokens"] == max_tokens or j["choices"][0]["finish_reason"] == "stop",
              f"the running request was cut: {j['usage']}")
        check("stream" in out, "the running stream got no end")
        _, fins, usage, _, _ = out["stream"]
        check(fins[0] in FINISH and usage["completion_tokens"] == max_tokens,
              f"the running stream was cut: {fins} {usage}")
        print(f"     exited {time.monotonic() - t_sig:.2f} s after SIGTERM")
        check(draining, "the requests ended before the probes: not a test of the drain")
        check(health[0] == 503 and health[2].get("status") == "draining" and
              health[1].get("retry-after"), f"/health while draining: {health}")
        check(live[0] == 200, f"/live while draining: {live}")
        check(refused[0] == 503 and refused[1].get("retry-after"), f"a new request while draining: "
              f"{refused[0]} {refused[1]} {refused[2]}")

    case("sigterm: running requests complete; draining: /health 503, /live 200, new work 503; exit 0",
         during_requests, daemon=d)


def sigterm_timeout_cases(d):
    def no_access_log():
        st, hd, _ = d.post("/v1/completions", {"prompt": [1, 2], "max_tokens": 2})
        check(st == 200 and len(hd.get("x-request-id", "")) == 32, f"{st} {hd}")
        time.sleep(0.3)  # the line would follow the answer
        with open(d.log_path, "rb") as f:
            log = f.read().decode(errors="replace")
        check(" /v1/completions " not in log and "/health" not in log,
              f"access-log lines with --access-log off:\n{log[-600:]}")

    case("--access-log off: no line per request", no_access_log, daemon=d)

    def cut_at_timeout():
        out = {}

        def streamed():
            # (logprobs: a chunk per token, the token-id model has no text)
            s = SSE(d, "/v1/completions", {"prompt": [7, 8, 9], "max_tokens": 6000, "stream": True,
                                           "logit_bias": NO_EOS, "logprobs": 0,
                                           "temperature": 0}, timeout=T(60))
            chunks, fins, err = 0, [], None
            try:
                for j in s.events():
                    chunks += 1
                    fins += [c.get("finish_reason") for c in j["choices"] if c.get("finish_reason")]
            except Exception as e:  # noqa: BLE001
                err = e
            finally:
                s.close()
            out["stream"] = (chunks, fins, err, s.done)

        t = threading.Thread(target=streamed)
        d.wait_idle()
        t.start()
        d.wait_running(1, "the request never ran")
        t_sig = time.monotonic()
        d.signal(signal.SIGTERM)
        rc = d.wait_exit(T(20))
        dt = time.monotonic() - t_sig
        t.join(T(20))
        check(rc == 0, f"exit status {rc} after SIGTERM, want 0")
        check(dt < 1 + T(8), f"exited {dt:.1f} s after SIGTERM with --shutdown-timeout-s 1")
        check("stream" in out and not t.is_alive(), "the client of the cut request hangs")
        chunks, fins, err, done = out["stream"]
        print(f"     exited {dt:.2f} s after SIGTERM; the cut stream: {chunks} chunks, finish {fins}, "
              f"[DONE] {'seen' if done else 'not seen'}{'' if err is None else ', ' + str(err)[:80]}")
        check(chunks > 0, "no chunk before the cut")

    case("sigterm: --shutdown-timeout-s 1 cuts a long request, exit 0 promptly", cut_at_timeout, daemon=d)



# ---------------------------------------------------------------------------

def run_sdk(node, script):
    # tools/npm-ci.sh installs the pinned SDK (tests/clients/npm-sdk) first
    here = os.path.dirname(os.path.abspath(__file__))
    npm_ci = [os.path.join(here, "..", "..", "tools", "npm-ci.sh"), os.path.join(here, "..", "clients", "npm-sdk"),
              "--"]

    def sdk(d, model):
        r = subprocess.run(["bash", *npm_ci, node, script,
                            "--base-url", f"http://127.0.0.1:{d.port}/v1", "--model", model],
                           capture_output=True, text=True, timeout=T(300))
        out = (r.stdout + r.stderr).strip()
        for line in out.splitlines():
            print("     | " + line)
        check(r.returncode == 0, f"openai_sdk.mjs exited {r.returncode}")
    return sdk


def main():
    global SCALE, TOKEN_MODEL, NO_EOS, NO_EOS_CHAT
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--moeserve", required=True)
    ap.add_argument("--model", required=True, help="token-id model (no tokenizer)")
    ap.add_argument("--chat-model", required=True, help="model folder with the o200k_harmony tokenizer.json")
    ap.add_argument("--workdir", help="logs and scratch (default: a temporary folder)")
    ap.add_argument("--timeout-scale", type=float,
                    default=float(os.environ.get("MS_TEST_TIMEOUT_SCALE", "1") or 1))
    ap.add_argument("--node", help="node: also run tests/clients/openai_sdk.mjs against the chat daemon")
    ap.add_argument("--only", help="comma-separated daemons to run (chat,broken,auth,queue,sigterm)")
    a = ap.parse_args()
    SCALE = a.timeout_scale
    TOKEN_MODEL = os.path.basename(os.path.normpath(a.model))
    NO_EOS, NO_EOS_CHAT = no_eos(a.model), no_eos(a.chat_model)
    only = set(a.only.split(",")) if a.only else None
    tmp = None
    if a.workdir:
        os.makedirs(a.workdir, exist_ok=True)
        work = a.workdir
    else:
        work = tmp = tempfile.mkdtemp(prefix="ms-server-test-")
    t_start = time.monotonic()
    moeserve = os.path.abspath(a.moeserve)

    # a folder whose config.json names a field with the wrong type
    broken = os.path.join(work, "broken-model")
    shutil.rmtree(broken, ignore_errors=True)
    shutil.copytree(a.model, broken)
    with open(os.path.join(broken, "config.json")) as f:
        cfg = json.load(f)
    cfg["num_hidden_layers"] = "four"
    with open(os.path.join(broken, "config.json"), "w") as f:
        json.dump(cfg, f)

    def want(name):
        return only is None or name in only

    def section(name, model, extra, body, ready=True):
        if not want(name):
            return
        try:
            d = Daemon(moeserve, model, work, name, *extra)
        except Exception as e:  # noqa: BLE001
            msg = f"{type(e).__name__}: {e}"

            def cannot_start():
                raise AssertionError(msg)
            case(f"{name}: start the daemon", cannot_start)
            return
        if ready:
            ok = case(f"{name}: ready; /health 503 with a reason before", check_ready, d, daemon=d)
            if not ok:
                d.stop()
                d.print_log()
                return
        try:
            body(d)
        finally:
            if d.proc.poll() is None:
                rc = d.stop()
                if name != "broken":
                    case(f"{name}: exit status 0 on SIGTERM", lambda: check(rc == 0, f"exit status {rc}"),
                         daemon=d)
            else:
                d.log.close()
            if d.failed:
                d.print_log()

    def check_ready(d):
        seen = d.wait_ready()
        dt = time.monotonic() - d.t0
        for j in seen:
            check(j.get("status") == "loading", f"/health while loading: {j}")
        print(f"     ready after {dt:.2f} s; {len(seen)} answers 503 {seen[0] if seen else ''} before")

    sdk = run_sdk(a.node, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients", "openai_sdk.mjs")) \
        if a.node else None

    # (the context its cases measure against; the default is the auth section's)
    section("chat", a.chat_model, ["--ctx-size", "8192"], lambda d: chat_cases(d, os.path.basename(os.path.normpath(a.chat_model)),
                                                            sdk))
    section("broken", broken, [], broken_cases, ready=False)
    section("auth", a.model, ["--api-key", "s3cret-key", "--max-body-bytes", "2K",
                              "--cors-origin", "https://app.example", "--log-format", "json"], auth_cases)
    # a context long enough that the keep-alive case's long request lasts
    # seconds even at thousands of tokens/s
    section("queue", a.model, ["--max-running", "1", "--max-queue", "1", "--keepalive-s", "1",
                               "--ctx-size", "16384", "--kv-cache-bytes", "48M"], queue_cases)
    section("sigterm", a.model, ["--shutdown-timeout-s", "30"], sigterm_cases)
    section("sigterm-timeout", a.model, ["--shutdown-timeout-s", "1", "--access-log", "off"],
            sigterm_timeout_cases)

    passed = sum(ok for _, ok in RESULTS)
    failed = len(RESULTS) - passed
    print(f"server: {passed} passed, {failed} failed ({time.monotonic() - t_start:.1f} s)")
    if tmp and not failed:
        shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(1 if failed or not passed else 0)


if __name__ == "__main__":
    main()
