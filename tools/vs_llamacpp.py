#!/usr/bin/python3
"""moeserve against llama.cpp on one checkpoint, side by side, alternating.

    /usr/bin/python3 tools/vs_llamacpp.py --model CKPT [--context 8192[,32768] | --context ""]
        [--rounds 3] [--threads 2] [--decode-tokens 32] [--moeserve PATH] [--skip-check]

CKPT is a native-MXFP4 gpt-oss checkpoint (tools/bench_ckpt.py --format
mxfp4).  llama.cpp is Debian's build (tools/llamacpp.sh); it reads the
checkpoint's GGUF twin (tools/gguf_twin.py: the same MXFP4 expert bytes,
dense weights in Q8_0 as in llama.cpp's default gpt-oss GGUF), written once
into build-llama/twins/.

First a check that the twin is the same model: a small random checkpoint
(tools/gptoss_ckpt.py, preset default) goes through the twin writer with
f32 dense weights, and llama.cpp's greedy continuation (f32 KV cache) must
equal tools/gptoss_ref.py's token for token.

Then --rounds rounds, the two engines' order swapped each round so drift
in this machine's bandwidth falls on both: `moeserve bench --context`
(decode at batch 1 after 0 and N tokens of context, prefill of 512 and of N
tokens) and llama-bench with the same threads (-r 1: tg at depth 0 and N,
pp512 and ppN, its default f16 KV cache and flash attention).  Prints every
round, then the medians, each engine's depth ratios and moeserve over
llama.cpp.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PY = "/usr/bin/python3"
LLAMA = [os.path.join(HERE, "llamacpp.sh")]


def sh(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, **kw)
    if r.returncode != 0:
        sys.stderr.write(r.stderr.decode(errors="replace")[-3000:])
        raise SystemExit(f"vs_llamacpp: failed ({r.returncode}): {' '.join(cmd)}")
    return r.stdout


def llama_tokens(out, prompt):
    """Token ids from llama-completion's printed text: the stand-in vocabulary
    prints ids >= 256 as <tokN> and the first 256 as their bytes."""
    if not out.startswith(prompt):
        raise SystemExit(f"vs_llamacpp: llama.cpp echoed {out[:40]!r}, not the prompt")
    ids = []
    for m in re.finditer(rb"<tok(\d+)>|<\|return\|>|<\|endoftext\|>|(.)", out[len(prompt):], re.S):
        if m.group(1):
            ids.append(int(m.group(1)))
        elif m.group(2) is not None:
            ids.append(m.group(2)[0])
    while ids and ids[-1] == 10:  # llama-completion's closing newlines
        ids.pop()
    return ids


def check_twin(n=12):
    with tempfile.TemporaryDirectory() as tmp:
        ck, gg = os.path.join(tmp, "ck"), os.path.join(tmp, "twin.gguf")
        sh([PY, os.path.join(HERE, "gptoss_ckpt.py"), "--out", ck, "--preset", "default", "--format", "mxfp4"])
        sh([PY, os.path.join(HERE, "gguf_twin.py"), ck, gg, "--dense", "f32"])
        prompt = b"hello world"
        out = sh(LLAMA + ["llama-completion", "-m", gg, "-t", "2", "-p", prompt.decode(), "-n", str(n),
                          "--temp", "0", "--ignore-eos", "-no-cnv", "-ctk", "f32", "-ctv", "f32"])
        got = llama_tokens(out, prompt)[:n]
        ref = sh([PY, os.path.join(HERE, "gptoss_ref.py"), "generate", "--model", ck, "--tokens",
                  ",".join(map(str, prompt)), "--max-tokens", str(n), "--ignore-eos"])
        want = [int(x) for x in ref.split()[-n:]]
    same = sum(a == b for a, b in zip(got, want))
    print(f"twin check: llama.cpp's greedy tokens {got}\n            tools/gptoss_ref.py's     {want}"
          f"\n            {same}/{n} agree")
    if got != want:
        raise SystemExit("vs_llamacpp: the GGUF twin does not compute the reference's model; stopping")


def twin_of(model):
    st = os.stat(os.path.join(model, "config.json"))
    size = sum(os.path.getsize(os.path.join(model, f)) for f in os.listdir(model) if f.endswith(".safetensors"))
    name = f"{os.path.basename(os.path.normpath(model))}-{size}-{int(st.st_mtime)}.gguf"
    path = os.path.join(ROOT, "build-llama", "twins", name)
    if not os.path.exists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        print(f"writing the GGUF twin {path}", flush=True)
        sh([PY, os.path.join(HERE, "gguf_twin.py"), model, path])
    return path


def run_moeserve(a, ctxs):
    ctx = ["--context", ",".join(map(str, ctxs))] if ctxs else []
    out = sh([a.moeserve, "bench", "--model", a.model, "--threads", str(a.threads), "--decode-tokens",
              str(a.decode_tokens), "--json"] + ctx)
    j = json.loads(out.decode().strip().splitlines()[-1])
    r = {("decode", 0): j["decode_tokens_per_s"], ("prefill", 512): j["prefill_tokens_per_s"]}
    for n in ctxs:
        r[("decode", n)] = j[f"ctx{n}_batch1_tokens_per_s"]
        r[("prefill", n)] = j[f"ctx{n}_prefill_tokens_per_s"]
    return r


def run_llama(a, twin, ctxs):
    base = LLAMA + ["llama-bench", "-m", twin, "-t", str(a.threads), "-r", "1", "-o", "jsonl"]
    rows = []
    rows += sh(base + ["-p", ",".join(map(str, [512] + ctxs)), "-n", str(a.decode_tokens), "-d", "0"]).splitlines()
    for n in ctxs:
        rows += sh(base + ["-p", "0", "-n", str(a.decode_tokens), "-d", str(n)]).splitlines()
    r = {}
    for line in rows:
        j = json.loads(line)
        if j["n_gen"]:
            r[("decode", j["n_depth"])] = j["avg_ts"]
        else:
            r[("prefill", j["n_prompt"])] = j["avg_ts"]
    return r


def table(rounds, ctxs):
    keys = [("decode", 0)] + [("decode", n) for n in ctxs] + [("prefill", 512)] + [("prefill", n) for n in ctxs]
    med = {e: {k: statistics.median(r[e][k] for r in rounds) for k in keys} for e in ("moeserve", "llama.cpp")}
    print(f"\nmedians of {len(rounds)} round(s), tokens/s\n")
    print(f"{'':18} {'moeserve':>10} {'llama.cpp':>10} {'moeserve/llama':>15} {'ms vs short':>12} {'ll vs short':>12}")
    for k in keys:
        short = ("decode", 0) if k[0] == "decode" else ("prefill", 512)
        m, l_ = med["moeserve"][k], med["llama.cpp"][k]
        label = f"{k[0]} @ {k[1]}" if k[0] == "decode" else f"prefill {k[1]}"
        print(f"{label:18} {m:10.2f} {l_:10.2f} {m / l_:15.3f} {m / med['moeserve'][short]:12.3f}"
              f" {l_ / med['llama.cpp'][short]:12.3f}")
    return med


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--context", default="8192", help="depths, comma-separated; empty: short context only")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--decode-tokens", type=int, default=32)
    ap.add_argument("--moeserve", default=os.path.join(ROOT, "build", "server", "moeserve"))
    ap.add_argument("--skip-check", action="store_true")
    a = ap.parse_args()
    ctxs = [int(x) for x in a.context.split(",") if x]
    print(sh(LLAMA + ["version"]).decode().strip())
    if not a.skip_check:
        check_twin()
    twin = twin_of(a.model)
    rounds = []
    for i in range(a.rounds):
        r = {}
        order = ("moeserve", "llama.cpp") if i % 2 == 0 else ("llama.cpp", "moeserve")
        for e in order:
            r[e] = run_moeserve(a, ctxs) if e == "moeserve" else run_llama(a, twin, ctxs)
        rounds.append(r)
        print(f"round {i + 1}: " + "; ".join(
            f"{e} " + " ".join(f"{k[0][0]}{k[1]}={v:.1f}" for k, v in sorted(r[e].items())) for e in r), flush=True)
    med = table(rounds, ctxs)
    print(json.dumps({"rounds": len(rounds), "threads": a.threads, "medians": {
        e: {f"{k[0]}_{k[1]}": v for k, v in m.items()} for e, m in med.items()}}))


if __name__ == "__main__":
    main()
