#!/usr/bin/python3
"""Golden test: `moeserve generate` against the float64 numpy reference.

For every checkpoint preset of tools/gptoss_ckpt.py (or the ones named) this
generates the random checkpoint, then for prompts of 1, 13 and 211 tokens runs

    MOESERVE generate --model DIR --tokens ... --max-tokens 8 --ignore-eos --logits-out F

and the reference (tools/gptoss_ref.py, imported) on the same input, and
requires max |logit difference| over all prompt positions <= 1e-3 and the same
greedy ids.  The 211-token prompt is longer than every preset's sliding
window.  Once per preset the binary also runs the long prompt with --threads 1
and --threads 3, whose logits must agree within 1e-5.

Prompts are seeded random ids; one is redrawn (deterministically) when the
reference run comes within 1e-4 of a router top-k tie or a greedy tie, so a
correct fp32 binary cannot fail by chance.

    /usr/bin/python3 tests/e2e/golden.py --moeserve BUILD/moeserve [--preset NAME ...]
        [--workdir DIR] [--timeout S]

Prints one line per case and `golden: N passed, M failed`; exits 1 on any
failure.  Needs only numpy (run with /usr/bin/python3).
"""

import argparse
import json
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

# With MOESERVE_KV_DTYPE=bf16 both the binary and the reference store K and V
# in bf16. The reference's K is float64, the binary's fp32: for about one
# value in 40,000 the two fall on either side of a bf16 rounding midpoint and
# are stored one bf16 ulp apart, which every later query reads. Measured over
# the presets: 5e-3 at worst (most cases ~1e-6); a reference that does not
# round differs by 1e-2 to 1.8.
#
# With MOESERVE_KV_DTYPE=fp8 the same happens on e4m3's midpoints, 16 times
# wider apart: most cases agree to ~1e-5, the few that store one value a
# code apart differ by up to ~4e-2 (measured), where a reference that does
# not round fp8 differs by ~1. Such a difference can also flip a greedy
# step whose top two logits are that close: ids are compared up to the
# first step where the reference's margin is below ID_MARGIN, which alone
# may differ (the contexts part there).
KV_DTYPE = os.environ.get("MOESERVE_KV_DTYPE", "f32")
LOGIT_TOL = {"f32": 1e-3, "bf16": 1e-2, "fp8": 1e-1}[KV_DTYPE]  # fp32 C vs float64 reference
ID_MARGIN = {"f32": 0.0, "bf16": 0.0, "fp8": 0.2}[KV_DTYPE]
THREADS_TOL = 1e-5   # same binary, different thread counts
MAX_TOKENS = 8
PROMPT_LENS = (1, 13, 211)
THREAD_COUNTS = (1, 3)

# An fp32 implementation may legitimately resolve a near-tie the other way: a
# router whose k-th and (k+1)-th logits differ by ~1e-6 switches experts, and
# a greedy step with two equal top logits switches tokens; either looks like a
# gross failure.  Prompts whose reference run comes that close are redrawn.
# The binary runs with --ignore-eos, as the reference never stops early.
MIN_ROUTER_GAP = 1e-4
MIN_GREEDY_MARGIN = 1e-4
PROMPT_TRIES = 20


class CaseError(Exception):
    pass


class Want(list):
    """The reference's generated ids, with its top-2 margin at each step."""

    def __init__(self, ids, margins):
        super().__init__(ids)
        self.margins = list(margins)


def ids_agree(got, want):
    """got == want, except that from the first step where the reference's
    margin is below ID_MARGIN on, the ids are not compared."""
    for i, w in enumerate(want):
        if getattr(want, "margins", None) and want.margins[i] < ID_MARGIN:
            return len(got) == len(want)
        if i >= len(got) or got[i] != w:
            return False
    return len(got) == len(want)


class Reference:
    """Reference results per (preset, prompt), plus the time spent on them."""

    def __init__(self):
        self.seconds = 0.0

    def pick_prompt(self, model, preset, length):
        """Seeded random prompt of `length` ids that keeps clear of ties;
        returns (prompt, generated ids, prompt logits, redraws)."""
        t0 = time.perf_counter()
        try:
            for attempt in range(PROMPT_TRIES):
                rng = np.random.default_rng([zlib.crc32(preset.encode()), length, attempt])
                prompt = rng.integers(0, model.cfg.vocab, length).tolist()
                stats = gptoss_ref.Stats()
                ids, logits = gptoss_ref.generate(model, prompt, MAX_TOKENS, stats)
                if stats.min_router_gap >= MIN_ROUTER_GAP and stats.min_greedy_margin >= MIN_GREEDY_MARGIN:
                    break
            return prompt, Want(ids, stats.margins[-len(ids):] if ids else []), logits, attempt
        finally:
            self.seconds += time.perf_counter() - t0


def run_binary(binary, model_dir, prompt, vocab, logits_path, timeout, threads=None):
    """-> (generated ids, logits [T, V] float32).  Raises CaseError."""
    if os.path.exists(logits_path):
        os.remove(logits_path)   # a stale file must not pass for fresh output
    cmd = [binary, "generate", "--model", model_dir, "--tokens", ",".join(map(str, prompt)),
           "--max-tokens", str(MAX_TOKENS), "--ignore-eos", "--logits-out", logits_path]
    if threads is not None:
        cmd += ["--threads", str(threads)]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise CaseError(f"timed out after {timeout} s: {' '.join(cmd[:4])} ...") from None
    except OSError as e:
        raise CaseError(f"cannot run {binary}: {e}") from None
    if res.returncode != 0:
        raise CaseError(f"exit status {res.returncode}\n--- stderr ---\n{res.stderr.rstrip()}")
    lines = res.stdout.splitlines()
    last = lines[-1] if lines else ""
    try:
        ids = [int(t) for t in last.split()]
    except ValueError:
        raise CaseError(f"last stdout line is not token ids: {last!r}") from None
    if not os.path.exists(logits_path):
        raise CaseError("no logits file written")
    raw = np.fromfile(logits_path, dtype="<f4")
    if raw.size != len(prompt) * vocab:
        raise CaseError(f"logits file holds {raw.size} floats, expected {len(prompt)} x {vocab}")
    logits = raw.reshape(len(prompt), vocab)
    if not np.all(np.isfinite(logits)):
        raise CaseError("logits contain NaN or Inf")
    return ids, logits


class Tally:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def case(self, preset, what, ok, detail, extra=None):
        if ok:
            self.passed += 1
        else:
            self.failed += 1
        print(f"{'PASS' if ok else 'FAIL'}  {preset:<14} {what:<18} {detail}", flush=True)
        if extra:
            print("      " + extra.replace("\n", "\n      "), flush=True)


def compare(got_ids, got_logits, want_ids, want_logits):
    d = float(np.max(np.abs(got_logits.astype(np.float64) - want_logits)))
    agree = ids_agree(got_ids, want_ids)
    ok = d <= LOGIT_TOL and agree
    same = "same" if got_ids == want_ids else "agree to a near tie" if agree else "DIFFER"
    detail = f"max|dlogit| {d:.2e}  ids {same}"
    extra = None if agree else f"got  {got_ids}\nwant {list(want_ids)}"
    return ok, detail, extra


def run_preset(name, args, workdir, ref, tally):
    model_dir = os.path.join(workdir, name)
    try:
        gptoss_ckpt.write_checkpoint(model_dir, gptoss_ckpt.preset_params(name))
        model = gptoss_ref.Model(model_dir)
        # the binary reads MOESERVE_KV_DTYPE too: both store K and V alike
        model.kv_dtype = KV_DTYPE
    except Exception as e:   # any generator/reference crash is this preset's failure
        tally.case(name, "checkpoint", False, f"{type(e).__name__}: {e}")
        return
    vocab = model.cfg.vocab
    long_case = None
    for length in PROMPT_LENS:
        what = f"prompt {length}"
        prompt, want_ids, want_logits, redraws = ref.pick_prompt(model, name, length)
        note = f"  (prompt redrawn {redraws}x)" if redraws else ""
        logits_path = os.path.join(workdir, f"{name}-{length}.f32")
        try:
            ids, logits = run_binary(args.moeserve, model_dir, prompt, vocab, logits_path, args.timeout)
        except CaseError as e:
            tally.case(name, what, False, "binary failed", str(e))
            continue
        ok, detail, extra = compare(ids, logits, want_ids, want_logits)
        tally.case(name, what, ok, detail + note, extra)
        if length == max(PROMPT_LENS):
            long_case = (prompt, want_ids, want_logits)

    if long_case is None:
        return
    prompt, want_ids, want_logits = long_case
    what = f"threads {THREAD_COUNTS[0]} vs {THREAD_COUNTS[1]}"
    runs = []
    try:
        for n in THREAD_COUNTS:
            path = os.path.join(workdir, f"{name}-threads{n}.f32")
            runs.append(run_binary(args.moeserve, model_dir, prompt, vocab, path, args.timeout, threads=n))
    except CaseError as e:
        tally.case(name, what, False, "binary failed", str(e))
        return
    (ids_a, la), (ids_b, lb) = runs
    d = float(np.max(np.abs(la.astype(np.float64) - lb)))
    ref_d = max(float(np.max(np.abs(l.astype(np.float64) - want_logits))) for _, l in runs)
    same = ids_a == ids_b and ids_agree(ids_a, want_ids)
    ok = d <= THREADS_TOL and ref_d <= LOGIT_TOL and same
    tally.case(name, what, ok,
               f"max|dlogit| {d:.2e}  vs ref {ref_d:.2e}  ids {'same' if same else 'DIFFER'}",
               None if same else f"threads {THREAD_COUNTS[0]}: {ids_a}\n"
                                 f"threads {THREAD_COUNTS[1]}: {ids_b}\nreference: {want_ids}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--moeserve", required=True, help="path of the moeserve binary")
    ap.add_argument("--preset", action="append", choices=list(gptoss_ckpt.PRESETS),
                    help="run only this preset (repeatable); default: all")
    ap.add_argument("--workdir", help="keep checkpoints and logits here instead of a temp dir")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per binary run")
    args = ap.parse_args(argv)

    presets = args.preset or list(gptoss_ckpt.PRESETS)
    tally, ref = Tally(), Reference()
    t0 = time.perf_counter()
    if args.workdir:
        os.makedirs(args.workdir, exist_ok=True)
        for name in presets:
            run_preset(name, args, args.workdir, ref, tally)
    else:
        with tempfile.TemporaryDirectory(prefix="golden-") as tmp:
            for name in presets:
                run_preset(name, args, tmp, ref, tally)
    total = time.perf_counter() - t0
    print(f"(reference {ref.seconds:.1f} s, total {total:.1f} s)")
    print(f"golden: {tally.passed} passed, {tally.failed} failed")
    return 1 if tally.failed else 0


if __name__ == "__main__":
    sys.exit(main())
