#!/usr/bin/python3
"""Held-out perplexity through the daemon's own /v1/completions, and decode speed.

Perplexity is computed the way lm-evaluation-harness scores loglikelihood
requests: each held-out chunk is sent as a completion prompt with
`echo: true, logprobs: 0, max_tokens: 0`; the response's
`logprobs.token_logprobs` holds log p(token | the tokens before it) for
every prompt token (null for the first, which has no context).  Perplexity
= exp(-(sum of those) / (their count)), over all chunks.

Held-out text: models/default/heldout.txt (every 50th KJV chapter, never
trained on; tools/train_default.py writes it): chapters separated by a blank
line, one verse per line.  Chunks: each chapter cut at verse boundaries into
pieces of at most 800 characters (at most ~240 tokens of the default
model's tokenizer, inside its 256-token training windows), verses joined by
newlines -- the format the model was trained on.

    # one model: starts `moeserve serve` on a free loopback port, scores, stops it
    /usr/bin/python3 tools/perplexity.py --model models/default/gptq-int4
    # a daemon that is already running (any OpenAI-compatible server)
    /usr/bin/python3 tools/perplexity.py --url http://127.0.0.1:8080 --heldout FILE
    # every variant under a folder: a Markdown table with decode tokens/s
    /usr/bin/python3 tools/perplexity.py --table models/default

Options: --moeserve BIN (default build/server/moeserve), --heldout FILE
(default: heldout.txt next to the model folder), --max-chunks N (the first N
chunks only), --threads N (daemon and bench threads, default 2), --json.
Speed (--table, or --speed for one model) comes from `moeserve bench
--model DIR --json`: decode_tokens_per_s is batch-1 greedy decoding.

Only the standard library is used (tests/e2e/default_models.py imports it).
"""

import argparse
import http.client
import json
import math
import os
import socket
import subprocess
import sys
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MAX_CHARS = 800
# the variants tools/quantize_default.py writes, in table order
VARIANTS = ["bf16", "mxfp4", "gptq-int4", "awq-int4", "quark-w4a8"]


def chunks(text, max_chars=MAX_CHARS):
    """Held-out text -> prompts: per chapter (blank-line separated), verses
    (lines) joined by newlines, cut at verse boundaries into pieces of at
    most max_chars characters (a longer single verse is a piece alone)."""
    out = []
    for chapter in text.split("\n\n"):
        cur = []
        size = 0
        for line in chapter.split("\n"):
            if not line.strip():
                continue
            if cur and size + 1 + len(line) > max_chars:
                out.append("\n".join(cur))
                cur, size = [], 0
            size += len(line) + (1 if cur else 0)
            cur.append(line)
        if cur:
            out.append("\n".join(cur))
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`moeserve serve --model DIR` on a free loopback port (or an existing
    daemon at a URL)."""

    def __init__(self, model=None, moeserve=None, url=None, threads=2, log=None, timeout=120):
        self.proc = None
        self.log = log
        if url:
            u = urllib.parse.urlsplit(url)
            self.host, self.port = u.hostname, u.port or 80
        else:
            self.host = "127.0.0.1"
            for _ in range(5):
                self.port = free_port()
                out = open(log, "wb") if log else subprocess.DEVNULL
                self.proc = subprocess.Popen(
                    [moeserve, "serve", "--model", model, "--host", self.host, "--port", str(self.port),
                     "--threads", str(threads)],
                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
                if self._wait(timeout):
                    break
                rc = self.proc.poll()
                if rc != 69:    # 69: the port was taken in between; try another
                    self.close()
                    raise RuntimeError(f"moeserve serve --model {model} did not become ready "
                                       f"(exit {rc}; log: {log or 'not kept'})")
            else:
                raise RuntimeError("no free port")
        self.model_id = self.get("/v1/models")["data"][0]["id"]

    def _wait(self, timeout):
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self.proc.poll() is not None:
                return False
            try:
                c = http.client.HTTPConnection(self.host, self.port, timeout=5)
                c.request("GET", "/health")
                r = c.getresponse()
                r.read()
                c.close()
                if r.status == 200:
                    return True
            except OSError:
                pass
            time.sleep(0.1)
        return False

    def request(self, method, path, body=None, timeout=600):
        c = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            h = {"Content-Type": "application/json"} if body is not None else {}
            c.request(method, path, body=json.dumps(body) if body is not None else None, headers=h)
            r = c.getresponse()
            data = r.read()
        finally:
            c.close()
        if r.status != 200:
            raise RuntimeError(f"{method} {path}: HTTP {r.status}: {data[:300]!r}")
        return json.loads(data)

    def get(self, path):
        return self.request("GET", path)

    def post(self, path, body):
        return self.request("POST", path, body)

    def close(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def score(server, prompts, batch=8):
    """-> (sum of log p over every prompt token but the first, token count)."""
    total, count = 0.0, 0
    for i in range(0, len(prompts), batch):
        part = prompts[i:i + batch]
        r = server.post("/v1/completions", {"model": server.model_id, "prompt": part,
                                            "max_tokens": 0, "echo": True, "logprobs": 0,
                                            "temperature": 0})
        choices = sorted(r["choices"], key=lambda ch: ch["index"])
        if len(choices) != len(part):
            raise RuntimeError(f"{len(part)} prompts, {len(choices)} choices")
        for ch in choices:
            lps = ch["logprobs"]["token_logprobs"]
            if lps and lps[0] is not None:
                raise RuntimeError("the first echoed token has a logprob: not the lm-eval shape")
            vals = [v for v in lps[1:] if v is not None]
            if len(vals) != len(lps) - 1:
                raise RuntimeError("a prompt token other than the first has no logprob")
            total += sum(vals)
            count += len(vals)
    return total, count


def perplexity(server, prompts):
    total, count = score(server, prompts)
    return math.exp(-total / count), count


def bench(moeserve, model, threads=2):
    """`moeserve bench --json` -> its JSON line (decode_tokens_per_s, ...)."""
    r = subprocess.run([moeserve, "bench", "--model", model, "--threads", str(threads), "--json"],
                       capture_output=True, text=True, check=True)
    return json.loads(r.stdout.strip().split("\n")[-1])


def weight_bytes(model):
    return sum(os.path.getsize(os.path.join(model, f)) for f in os.listdir(model)
               if f.endswith(".safetensors"))


def read_heldout(path, max_chunks=None):
    with open(path) as f:
        ps = chunks(f.read())
    return ps[:max_chunks] if max_chunks else ps


def evaluate(model, moeserve, heldout, max_chunks=None, threads=2, speed=False, log=None):
    prompts = read_heldout(heldout, max_chunks)
    t0 = time.monotonic()
    with Server(model, moeserve, threads=threads, log=log) as s:
        ppl, n = perplexity(s, prompts)
    res = {"model": model, "heldout_ppl": ppl, "heldout_tokens": n, "chunks": len(prompts),
           "seconds": round(time.monotonic() - t0, 1), "weight_bytes": weight_bytes(model)}
    if speed:
        b = bench(moeserve, model, threads)
        res.update(decode_tokens_per_s=b["decode_tokens_per_s"],
                   prefill_tokens_per_s=b["prefill_tokens_per_s"], kernels=b.get("kernels"))
    return res


def describe(model):
    """Short text of the quantization a folder's config.json declares."""
    with open(os.path.join(model, "config.json")) as f:
        q = json.load(f).get("quantization_config")
    if not q:
        return "unquantized BF16"
    m = q.get("quant_method")
    if m == "mxfp4":
        return "MXFP4 experts, rest BF16"
    if m == "gptq":
        return f"GPTQ int{q['bits']} g{q['group_size']} {'sym' if q.get('sym') else 'asym'}"
    if m == "awq":
        return f"AWQ int{q['bits']} g{q['group_size']} {'zero point' if q.get('zero_point') else 'sym'}"
    if m == "quark":
        return "Quark W4A8: MXFP4 weights, FP8 static activations"
    return m


def table(root, moeserve, threads=2, max_chunks=None, heldout=None):
    heldout = heldout or os.path.join(root, "heldout.txt")
    names = [v for v in VARIANTS if os.path.isdir(os.path.join(root, v))]
    names += sorted(d for d in os.listdir(root) if d not in names and
                    os.path.exists(os.path.join(root, d, "config.json")))
    rows = []
    for name in names:
        r = evaluate(os.path.join(root, name), moeserve, heldout, max_chunks, threads, speed=True)
        r["name"] = name
        rows.append(r)
        print(f"{name}: ppl {r['heldout_ppl']:.3f} over {r['heldout_tokens']} tokens, decode "
              f"{r['decode_tokens_per_s']:.1f} tokens/s", file=sys.stderr, flush=True)
    base = next((r["heldout_ppl"] for r in rows if r["name"] == "bf16"), None)
    lines = ["| format | what | held-out perplexity | vs bf16 | decode tokens/s (batch 1) | weights |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        rel = f"{100 * (r['heldout_ppl'] / base - 1):+.1f}%" if base else "—"
        lines.append(f"| `{r['name']}` | {describe(r['model'])} | {r['heldout_ppl']:.2f} | {rel} | "
                     f"{r['decode_tokens_per_s']:.0f} | {r['weight_bytes'] / 1e6:.1f} MB |")
    tokens = rows[0]["heldout_tokens"] if rows else 0
    lines.append("")
    lines.append(f"Held-out: {tokens} tokens of {os.path.basename(heldout)} "
                 f"({rows[0]['chunks'] if rows else 0} chunks); decode: `moeserve bench`, "
                 f"{threads} threads, {rows[0].get('kernels') if rows else ''} kernels.")
    return "\n".join(lines), rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--model", help="checkpoint folder to serve and score")
    g.add_argument("--url", help="score against a running daemon instead")
    g.add_argument("--table", metavar="DIR", help="every variant under DIR, as a Markdown table")
    ap.add_argument("--moeserve", default=os.path.join(ROOT, "build", "server", "moeserve"))
    ap.add_argument("--heldout", help="held-out text (default: heldout.txt beside the model)")
    ap.add_argument("--max-chunks", type=int)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--speed", action="store_true", help="also run `moeserve bench` (--model)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)

    if a.table:
        text, rows = table(a.table, a.moeserve, a.threads, a.max_chunks, a.heldout)
        print(json.dumps(rows) if a.json else text)
        return 0
    if a.url:
        if not a.heldout:
            ap.error("--url needs --heldout")
        with Server(url=a.url) as s:
            ppl, n = perplexity(s, read_heldout(a.heldout, a.max_chunks))
        res = {"url": a.url, "heldout_ppl": ppl, "heldout_tokens": n}
    else:
        model = a.model.rstrip("/")
        heldout = a.heldout or os.path.join(os.path.dirname(model), "heldout.txt")
        res = evaluate(model, a.moeserve, heldout, a.max_chunks, a.threads, a.speed)
    if a.json:
        print(json.dumps(res))
    else:
        print(f"held-out perplexity {res['heldout_ppl']:.3f} over {res['heldout_tokens']} tokens"
              + (f"; decode {res['decode_tokens_per_s']:.1f} tokens/s" if "decode_tokens_per_s" in res
                 else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
