#!/usr/bin/python3
"""Golden test for quantized checkpoints (issue 3): `moeserve` against the
float64 numpy reference on every QUANT_PRESET of tools/gptoss_ckpt.py (GPTQ,
AWQ, AMD Quark MXFP4/FP8 W4A8/W4A4/W8A8, llm-compressor's BF16 layout).

Per preset the checkpoint is written, then

(a) dequantization, bit for bit: for an attention projection, the fused
    gate_up and the down projection of two different experts (first layer,
    expert 0; last layer, last expert), the router and lm_head

        MOESERVE dequant --model DIR --module NAME --out FILE

    must write little-endian float32 [rows x cols] and print "rows cols" as
    its last stdout line; the array must equal tools/gptoss_ref.py's
    dequant_module() exactly (np.array_equal after the shape check).

(b) logits: for prompts of 1, 13 and 150 tokens

        MOESERVE generate --model DIR --tokens ... --max-tokens 8 --ignore-eos --logits-out F

    against the reference.  Weight-only formats (GPTQ, AWQ, llmc, Quark
    without activation quantization): max |dlogit| <= 1e-3 over all prompt
    positions and the same 8 greedy ids.  Formats that quantize activations:
    relative L2 error ||d|| / ||ref|| <= 1e-3 over all prompt logits, and the
    same ids for every step before the first step whose reference top-2
    margin is <= 0.05 (the line says how many steps were compared).

Prompts are seeded random ids, redrawn (deterministically) when the reference
comes within 1e-4 of a router top-k tie or a greedy tie, as in golden.py.

Activation quantization needs two more rules, because a correct fp32
implementation legitimately rounds an element sitting (almost) exactly on an
fp8/fp4 rounding tie the other way (x/s in float32 vs float64; doc 4 notes the
same for x/s vs x*(1/s)), and in models this small one such flip moves the
logits of every later position by 1e-3..1e-2 relative:
  * tokens whose FIRST-layer quantized attention input lies within 1e-6 (of
    the row's max) of a tie are left out of the prompts.  That input depends
    on the token alone, and with per-token dynamic scales the bf16 embedding
    makes exact ties recur on every occurrence of such a token;
  * a logits comparison that fails is retried on up to 2 freshly drawn
    prompts of the same length, and the case passes if one attempt passes --
    but only when the failed attempt's first position still agrees (row
    relative error <= 1e-4): a cascade starts at the position of the flip,
    while a real error shows from the first position on and on every prompt.
    (In an fp32 emulation of the reference, about 7% of 150-token prompts and
    1% of 13-token prompts cascade past 1e-3.)

    /usr/bin/python3 tests/quant/quant_golden.py --moeserve BIN [--preset NAME ...]
        [--workdir DIR] [--timeout S] [--prompt-seed N]

Prints one line per case and `quant-golden: N passed, M failed`; exits 1 on
any failure.  Needs only numpy (run with /usr/bin/python3).
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
import zlib

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import gptoss_ckpt  # noqa: E402
import gptoss_ref  # noqa: E402

MAX_TOKENS = 8
PROMPT_LENS = (1, 13, 150)          # 150 > every quant preset's sliding window
WEIGHT_ONLY_TOL = 1e-3              # max |dlogit|, fp32 C vs float64 reference
ACT_REL_TOL = 1e-3                  # ||d|| / ||ref|| with activation quantization
ACT_MARGIN = 0.05                   # ids compared before the first step with margin <= this
ACT_RETRIES = 2                     # extra prompts after a failed activation-quant comparison
ACT_ROW_TOL = 1e-4                  # a retry needs position 0 within this (row-relative)
FIRST_LAYER_TIE_WINDOW = 1e-6       # tie tokens: within this fraction of the row max of a tie
MIN_ROUTER_GAP = 1e-4
MIN_GREEDY_MARGIN = 1e-4
PROMPT_TRIES = 20


class CaseError(Exception):
    pass


class Tally:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def case(self, preset, what, ok, detail, extra=None):
        if ok:
            self.passed += 1
        else:
            self.failed += 1
        print(f"{'PASS' if ok else 'FAIL'}  {preset:<36} {what:<40} {detail}", flush=True)
        if extra:
            print("      " + extra.replace("\n", "\n      "), flush=True)


class Reference:
    """Reference runs, timed (the budget is about the reference side)."""

    def __init__(self):
        self.seconds = 0.0

    def timed(self, fn, *a):
        t0 = time.perf_counter()
        try:
            return fn(*a)
        finally:
            self.seconds += time.perf_counter() - t0


def run(cmd, timeout):
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise CaseError(f"timed out after {timeout} s: {' '.join(cmd[:4])} ...") from None
    except OSError as e:
        raise CaseError(f"cannot run {cmd[0]}: {e}") from None
    if res.returncode != 0:
        raise CaseError(f"exit status {res.returncode}\n--- stderr ---\n{res.stderr.rstrip()}")
    return res.stdout.splitlines()


def run_dequant(binary, model_dir, module, path, timeout):
    """-> float32 [rows, cols] written by `BIN dequant`."""
    if os.path.exists(path):
        os.remove(path)
    lines = run([binary, "dequant", "--model", model_dir, "--module", module, "--out", path], timeout)
    last = lines[-1] if lines else ""
    try:
        rows, cols = (int(t) for t in last.split())
    except ValueError:
        raise CaseError(f"last stdout line is not 'rows cols': {last!r}") from None
    if not os.path.exists(path):
        raise CaseError("no output file written")
    raw = np.fromfile(path, dtype="<f4")
    if raw.size != rows * cols:
        raise CaseError(f"file holds {raw.size} floats, stdout says {rows} x {cols}")
    return raw.reshape(rows, cols)


def run_generate(binary, model_dir, prompt, vocab, path, timeout):
    """-> (generated ids, logits [T, V] float32)."""
    if os.path.exists(path):
        os.remove(path)   # a stale file must not pass for fresh output
    lines = run([binary, "generate", "--model", model_dir, "--tokens", ",".join(map(str, prompt)),
                 "--max-tokens", str(MAX_TOKENS), "--ignore-eos", "--logits-out", path], timeout)
    last = lines[-1] if lines else ""
    try:
        ids = [int(t) for t in last.split()]
    except ValueError:
        raise CaseError(f"last stdout line is not token ids: {last!r}") from None
    if not os.path.exists(path):
        raise CaseError("no logits file written")
    raw = np.fromfile(path, dtype="<f4")
    if raw.size != len(prompt) * vocab:
        raise CaseError(f"logits file holds {raw.size} floats, expected {len(prompt)} x {vocab}")
    logits = raw.reshape(len(prompt), vocab)
    if not np.all(np.isfinite(logits)):
        raise CaseError("logits contain NaN or Inf")
    return ids, logits


# ---------------------------------------------------------------------------
# (a) dequantization

def dequant_modules(p, index):
    """The modules checked for preset p (index varies the attention
    projection across presets so all four get covered)."""
    L, E = p["layers"], p["experts"]
    proj = "qkvo"[index % 4]
    return [f"model.layers.{index % L}.self_attn.{proj}_proj",
            "model.layers.0.mlp.experts.0.gate_up", "model.layers.0.mlp.experts.0.down",
            f"model.layers.{L - 1}.mlp.experts.{E - 1}.gate_up",
            f"model.layers.{L - 1}.mlp.experts.{E - 1}.down",
            f"model.layers.{L - 1}.mlp.router", "lm_head"]


def check_dequant(name, p, index, model_dir, args, workdir, ref, tally):
    for module in dequant_modules(p, index):
        what = "dequant " + module.replace("model.layers.", "L").replace("mlp.experts.", "e")
        try:
            want = ref.timed(gptoss_ref.dequant_module, model_dir, module)
        except Exception as e:   # a reference failure is this case's failure
            tally.case(name, what, False, f"reference: {type(e).__name__}: {e}")
            continue
        path = os.path.join(workdir, f"{name}-dequant.f32")
        try:
            got = run_dequant(args.moeserve, model_dir, module, path, args.timeout)
        except CaseError as e:
            tally.case(name, what, False, "binary failed", str(e))
            continue
        if got.shape != want.shape:
            tally.case(name, what, False, f"shape {list(got.shape)}, expected {list(want.shape)}")
            continue
        if np.array_equal(got, want):
            tally.case(name, what, True, f"[{want.shape[0]} x {want.shape[1]}] bit-exact")
            continue
        bad = np.argwhere(got != want)
        r, c = bad[0]
        tally.case(name, what, False,
                   f"{len(bad)} of {want.size} elements differ, max |d| "
                   f"{float(np.nanmax(np.abs(got.astype(np.float64) - want))):.3e}",
                   f"first at [{r}, {c}]: got {got[r, c]!r} "
                   f"(0x{got[r:r + 1, c].view(np.uint32)[0]:08x}), want {want[r, c]!r} "
                   f"(0x{want[r:r + 1, c].view(np.uint32)[0]:08x})")


# ---------------------------------------------------------------------------
# (b) logits

def draw_prompt(model, preset, length, first_attempt, allowed, seed):
    """Seeded prompt of `length` ids from `allowed` that keeps clear of router
    and greedy ties (with activation quantization also: whose first step's
    margin exceeds ACT_MARGIN, so at least one id gets compared); returns
    (prompt, ids, logits, stats, attempt)."""
    for attempt in range(first_attempt, first_attempt + PROMPT_TRIES):
        rng = np.random.default_rng([zlib.crc32(preset.encode()), length, attempt, seed])
        prompt = allowed[rng.integers(0, len(allowed), length)].tolist()
        stats = gptoss_ref.Stats()
        ids, logits = gptoss_ref.generate(model, prompt, MAX_TOKENS, stats)
        if (stats.min_router_gap >= MIN_ROUTER_GAP and stats.min_greedy_margin >= MIN_GREEDY_MARGIN
                and not (model.act_quant and stats.margins and stats.margins[0] <= ACT_MARGIN)):
            break
    return prompt, ids, logits, stats, attempt


def compare(act_quant, got_ids, got_logits, want_ids, want_logits, stats):
    """-> (ok, detail, extra, retry_allowed)."""
    d = got_logits.astype(np.float64) - want_logits
    if not act_quant:
        err = float(np.max(np.abs(d)))
        same = got_ids == want_ids
        ok = err <= WEIGHT_ONLY_TOL and same
        detail = f"max|dlogit| {err:.2e}  ids {'same' if same else 'DIFFER'}"
        return ok, detail, None if same else f"got  {got_ids}\nwant {want_ids}", False
    rel = float(np.linalg.norm(d) / np.linalg.norm(want_logits))
    row = np.linalg.norm(d, axis=1) / np.linalg.norm(want_logits, axis=1)
    off = np.nonzero(row > ACT_ROW_TOL)[0]
    start = int(off[0]) if off.size else len(row)
    # steps before the first one whose reference top-2 margin is <= ACT_MARGIN
    n = next((i for i, m in enumerate(stats.margins) if m <= ACT_MARGIN), len(stats.margins))
    same = len(got_ids) == len(want_ids) and got_ids[:n] == want_ids[:n]
    ok = rel <= ACT_REL_TOL and same
    detail = f"rel L2 {rel:.2e}  ids {'same' if same else 'DIFFER'} over {n}/{len(want_ids)} steps"
    if not ok and start < len(row):
        detail += f" (diverges at position {start})"
    # retry only what looks like a rounding-tie cascade (see the docstring)
    retry = start > 0 or len(row) == 1
    return ok, detail, None if same else f"got  {got_ids}\nwant {want_ids} (first {n} compared)", retry


def check_logits(name, model, model_dir, args, workdir, ref, tally):
    vocab = model.cfg.vocab
    act = model.act_quant
    allowed = np.arange(vocab)
    if act:
        tie = set(ref.timed(model.first_layer_tie_tokens, FIRST_LAYER_TIE_WINDOW))
        allowed = np.array([t for t in range(vocab) if t not in tie])
    for length in PROMPT_LENS:
        what = f"prompt {length}" + (" (act-quant)" if act else "")
        attempt, notes, tries = 0, [], (1 + ACT_RETRIES) if act else 1
        for k in range(tries):
            prompt, want_ids, want_logits, stats, attempt = ref.timed(
                draw_prompt, model, name, length, attempt, allowed, args.prompt_seed)
            path = os.path.join(workdir, f"{name}-{length}.f32")
            try:
                ids, logits = run_generate(args.moeserve, model_dir, prompt, vocab, path, args.timeout)
            except CaseError as e:
                tally.case(name, what, False, "binary failed", str(e))
                break
            ok, detail, extra, retry = compare(act, ids, logits, want_ids, want_logits, stats)
            if ok or not retry or k == tries - 1:
                if attempt:
                    detail += f"  (prompt #{attempt})"
                if notes:
                    detail += "  after " + "; ".join(notes)
                tally.case(name, what, ok, detail, extra)
                break
            notes.append(f"#{attempt}: {detail}")
            attempt += 1


def run_preset(name, index, args, workdir, ref, tally):
    model_dir = os.path.join(workdir, name)
    p = gptoss_ckpt.preset_params(name)
    try:
        gptoss_ckpt.write_checkpoint(model_dir, p)
        model = ref.timed(gptoss_ref.Model, model_dir)
    except Exception as e:   # any generator/reference crash is this preset's failure
        tally.case(name, "checkpoint", False, f"{type(e).__name__}: {e}")
        return
    check_dequant(name, p, index, model_dir, args, workdir, ref, tally)
    check_logits(name, model, model_dir, args, workdir, ref, tally)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--moeserve", required=True, help="path of the moeserve binary")
    ap.add_argument("--preset", action="append", choices=list(gptoss_ckpt.QUANT_PRESETS),
                    help="run only this preset (repeatable); default: all")
    ap.add_argument("--workdir", help="keep checkpoints and outputs here instead of a temp dir")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per binary run")
    ap.add_argument("--prompt-seed", type=int, default=0,
                    help="mixed into every prompt's seed: another set of prompts (default 0)")
    args = ap.parse_args(argv)

    names = list(gptoss_ckpt.QUANT_PRESETS)
    presets = args.preset or names
    tally, ref = Tally(), Reference()
    t0 = time.perf_counter()
    if args.workdir:
        os.makedirs(args.workdir, exist_ok=True)
        for name in presets:
            run_preset(name, names.index(name), args, args.workdir, ref, tally)
    else:
        with tempfile.TemporaryDirectory(prefix="quant-golden-") as tmp:
            for name in presets:
                run_preset(name, names.index(name), args, tmp, ref, tally)
    total = time.perf_counter() - t0
    print(f"(reference {ref.seconds:.1f} s, total {total:.1f} s)")
    print(f"quant-golden: {tally.passed} passed, {tally.failed} failed")
    return 1 if tally.failed else 0


if __name__ == "__main__":
    sys.exit(main())
