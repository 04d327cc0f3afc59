#!/usr/bin/python3
"""The shipped default models: quality through the server, format by format.

For every variant under models/default (bf16, mxfp4, gptq-int4, awq-int4,
quark-w4a8) this starts `moeserve serve --model DIR` on a free loopback
port and checks:

  ppl-reference  held-out perplexity through /v1/completions (echo,
                 logprobs 0, max_tokens 0: tools/perplexity.py) within
                 REF_TOL of the same perplexity computed by the float64
                 numpy reference (tools/gptoss_ref.py) on the same token
                 ids (from the server's /tokenize) -- the daemon's kernels
                 for this format compute the model they should;
  ppl-margin     that perplexity at most MARGIN[format] worse than the bf16
                 model's (and not more than 3% better: a variant that beats
                 bf16 by that much is not the model it claims to be) -- the
                 format's quantization still works;
  completion     a greedy completion of "And God said" (32 tokens) is text:
                 at least 8 words, 6 of them distinct, >= 70% of them words
                 of the held-out chapters, no word more than half of them;
  chat           /v1/chat/completions "Continue: In the beginning God"
                 answers with text by the same rule, with at least 4 words
                 (3 distinct) (finish_reason printed).

The held-out text is the first --chunks (default 32, about 5400 tokens)
chunks of models/default/heldout.txt: KJV chapters the model never saw
(every 50th, tools/train_default.py).

Margins (relative perplexity increase over bf16):
  gptq-int4, awq-int4  5%   4-bit integer weights with float16 scales per
                            32 inputs, calibrated (GPTQ error feedback, AWQ
                            activation-aware scales): the issue's bound.
  mxfp4                8%   4-bit e2m1 weights with power-of-two (e8m0)
                            scales per 32 inputs and no calibration: a
                            coarser grid than int4 g32 (8 magnitudes, scale
                            rounded up to a power of two), on the experts
                            only.
  quark-w4a8          10%   the same MXFP4 expert weights (Quark's scale
                            rule) plus FP8 e4m3 static per-tensor inputs:
                            3 mantissa bits (up to 6.25% relative error
                            per activation) with one scale per expert
                            calibrated on text, so it may lose a little
                            more than MXFP4 alone.

    /usr/bin/python3 tests/e2e/default_models.py --moeserve BUILD/server/moeserve
        [--models DIR] [--workdir DIR] [--chunks N] [--variant NAME ...]

One line per case, then `default-models: N passed, M failed`; exit 1 on a
failure.  Needs numpy (the reference) and the standard library.
"""

import argparse
import os
import re
import sys
import time


HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import gptoss_ref  # noqa: E402
import perplexity  # noqa: E402

VARIANTS = ["bf16", "mxfp4", "gptq-int4", "awq-int4", "quark-w4a8"]
MARGIN = {"bf16": 0.0, "gptq-int4": 0.05, "awq-int4": 0.05, "mxfp4": 0.08, "quark-w4a8": 0.10}
BETTER_TOL = 0.03     # no variant may beat bf16 by more than this
REF_TOL = 0.01        # daemon vs numpy reference, relative perplexity
COMPLETION_PROMPT = "And God said"
CHAT_PROMPT = "Continue: In the beginning God"

RESULTS = []


def case(name, ok, detail):
    RESULTS.append(ok)
    print(f"{'ok  ' if ok else 'FAIL'} {name}: {detail}", flush=True)



def words(text):
    return re.findall(r"[A-Za-z]+", text)


def readable(text, vocab, min_words):
    """(ok, detail): at least min_words words, as many distinct ones as
    3/4 of that, >= 70% of them words of the held-out text, no word more
    than half of them."""
    w = [x.lower() for x in words(text)]
    if len(w) < min_words:
        return False, f"{len(w)} words (want {min_words}): {text!r}"
    known = sum(x in vocab for x in w) / len(w)
    top = max(w.count(x) for x in set(w)) / len(w)
    distinct = len(set(w))
    ok = known >= 0.7 and top <= 0.5 and distinct >= 0.75 * min_words
    return ok, (f"{100 * known:.0f}% known words, {distinct} distinct, top word {100 * top:.0f}%: "
                f"{text!r}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--moeserve", required=True)
    ap.add_argument("--models", default=os.path.join(ROOT, "models", "default"))
    ap.add_argument("--workdir", default=None, help="daemon logs (default: a temporary folder)")
    ap.add_argument("--chunks", type=int, default=32)
    ap.add_argument("--variant", action="append", help="only these (default: all)")
    a = ap.parse_args()

    names = a.variant or VARIANTS
    if "bf16" not in names:
        names = ["bf16"] + names      # the margins are relative to it
    heldout = os.path.join(a.models, "heldout.txt")
    missing = [n for n in names if not os.path.exists(os.path.join(a.models, n, "config.json"))]
    if missing or not os.path.exists(heldout):
        print(f"default-models: missing in {a.models}: {', '.join(missing) or 'heldout.txt'}")
        return 1
    workdir = a.workdir or os.path.join(os.environ.get("TMPDIR", "/tmp"), f"default-models-{os.getpid()}")
    os.makedirs(workdir, exist_ok=True)
    prompts = perplexity.read_heldout(heldout, a.chunks)
    with open(heldout) as f:
        vocab = {w.lower() for w in words(f.read())}

    ppl = {}
    for name in names:
        d = os.path.join(a.models, name)
        t0 = time.monotonic()
        log = os.path.join(workdir, f"{name}.log")
        try:
            with perplexity.Server(d, a.moeserve, log=log) as s:
                p, n = perplexity.perplexity(s, prompts)
                ids = [s.post("/tokenize", {"prompt": t})["tokens"] for t in prompts]
                comp = s.post("/v1/completions", {"model": s.model_id, "prompt": COMPLETION_PROMPT,
                                                  "max_tokens": 32, "temperature": 0})
                chat = s.post("/v1/chat/completions", {
                    "model": s.model_id, "messages": [{"role": "user", "content": CHAT_PROMPT}],
                    "max_tokens": 48, "temperature": 0})
        except (RuntimeError, OSError, KeyError, ValueError) as e:
            case(f"{name} serve", False, f"{e} (log: {log})")
            continue
        ppl[name] = p
        ref = gptoss_ref.Model(d)
        ref.kv_dtype = "bf16"  # the daemon's default KV cache, rounded alike
        rp, rn = gptoss_ref.perplexity(ref, ids)
        rel = p / rp - 1
        case(f"{name} ppl-reference", rn == n and abs(rel) <= REF_TOL,
             f"daemon {p:.3f}, numpy reference {rp:.3f} ({100 * rel:+.2f}%, limit "
             f"{100 * REF_TOL:.0f}%) over {n} tokens")
        if name != "bf16" and "bf16" in ppl:
            rel = p / ppl["bf16"] - 1
            case(f"{name} ppl-margin", -BETTER_TOL <= rel <= MARGIN[name],
                 f"{p:.3f} vs bf16 {ppl['bf16']:.3f}: {100 * rel:+.2f}% (limit "
                 f"+{100 * MARGIN[name]:.0f}%)")
        ok, detail = readable(comp["choices"][0]["text"], vocab, 8)
        case(f"{name} completion", ok, detail)
        msg = chat["choices"][0]["message"]
        ok, detail = readable(msg.get("content") or "", vocab, 4)
        case(f"{name} chat", ok, f"finish_reason {chat['choices'][0]['finish_reason']}, {detail}")
        print(f"     ({name}: {time.monotonic() - t0:.1f} s)", flush=True)

    failed = RESULTS.count(False)
    print(f"default-models: {RESULTS.count(True)} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
