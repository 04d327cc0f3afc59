#!/usr/bin/python3
"""CLI contract of `moeserve`: help, exit codes, error messages that name the
field, file or tensor, --logits-out, eos handling, generate --speculative,
inspect.

    /usr/bin/python3 tests/e2e/cli.py --moeserve BUILD/server/moeserve --workdir DIR

Each case prints PASS/FAIL; the last line is `cli: N passed, M failed`.
"""
import argparse
import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import bench_ckpt  # noqa: E402
import gptoss_ckpt  # noqa: E402

EX_OK, EX_USAGE, EX_DATAERR, EX_NOINPUT, EX_UNAVAILABLE = 0, 64, 65, 66, 69

results = []


def case(name, ok, detail=""):
    results.append(ok)
    print(f"{'PASS' if ok else 'FAIL'}  {name}{'' if ok else '  -- ' + detail}")


def run(binary, *args, env=None):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=120, env=e)


def expect(name, res, code, *needles):
    """Exit status code and every needle in stderr (errors) or stdout (help)."""
    text = res.stderr + res.stdout
    missing = [n for n in needles if n not in text]
    ok = res.returncode == code and not missing
    case(name, ok, f"exit {res.returncode} (want {code}); missing {missing}; output:\n{text[-800:]}")


def read_st(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    return json.loads(data[8:8 + n]), data[8 + n:]


def write_st(path, header, blob):
    hj = json.dumps(header).encode()
    hj += b" " * (-len(hj) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)) + hj + blob)


def copy_model(src, dst):
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    return dst


def edit_config(d, **changes):
    p = os.path.join(d, "config.json")
    with open(p) as f:
        c = json.load(f)
    for k, v in changes.items():
        if v is None:
            c.pop(k, None)
        else:
            c[k] = v
    with open(p, "w") as f:
        json.dump(c, f)


def serve_on_rocm_sim(b, model):
    """serve --backend rocm-sim answers a completion as the CPU does."""
    import time
    import urllib.request
    texts = {}
    for backend, port in (("cpu", 18091), ("rocm-sim", 18092)):
        p = subprocess.Popen([b, "serve", "--model", model, "--backend", backend, "--port", str(port)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        url = f"http://127.0.0.1:{port}"
        try:
            for _ in range(300):
                try:
                    with urllib.request.urlopen(url + "/health", timeout=2) as r:
                        if r.status == 200:
                            break
                except OSError:
                    time.sleep(0.1)
            body = json.dumps({"prompt": [3, 1, 4, 1, 5], "max_tokens": 6, "temperature": 0,
                               "logprobs": 2}).encode()
            req = urllib.request.Request(url + "/v1/completions", body,
                                         {"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=120) as r:
                out = json.load(r)["choices"][0]
            texts[backend] = (out["text"], out["logprobs"]["tokens"])
        except OSError as e:
            texts[backend] = f"error: {e}"
        finally:
            p.terminate()
            p.wait(timeout=60)
    case("serve --backend rocm-sim answers /v1/completions as the CPU does",
         texts["cpu"] == texts["rocm-sim"] and not isinstance(texts["cpu"], str), repr(texts))


def generate_speculative(b, base):
    """--speculative: auto (the default) decodes through the engine with
    n-gram drafts, off one token a pass; the ids are the same. The built-in
    model, whose text repeats, so that drafts are made and kept (the random
    one's continuation matches nothing)."""
    text = ("generate", "--prompt", "The quick brown fox jumps over the lazy dog. The quick brown fox",
            "--max-tokens", "160", "--ignore-eos")
    builtin = {"MOESERVE_MODEL": ""}
    off = run(b, *text, "--speculative", "off", env=builtin)
    on = run(b, *text, env=builtin)
    m = re.search(r"speculation auto: (\d+) drafts, (\d+) drafted tokens, (\d+) accepted", on.stderr)
    case("generate --speculative auto gives off's ids, drafts made and accepted",
         off.returncode == 0 and on.returncode == 0 and on.stdout == off.stdout
         and len(off.stdout.splitlines()[-1].split()) == 160 and "speculation off" in off.stderr
         and m is not None and int(m.group(3)) > 0,
         f"{off.stdout[-300:]!r} vs {on.stdout[-300:]!r}\n{off.stderr}{on.stderr}")
    rep = ",".join(["3", "1", "4", "1", "5", "9", "2", "6"] * 4)
    gen = ("generate", "--model", base, "--tokens", rep, "--max-tokens", "48", "--ignore-eos")
    off = run(b, *gen, "--speculative", "off")
    on = run(b, *gen)
    case("the random model's ids too", off.returncode == 0 and on.stdout == off.stdout
         and len(off.stdout.split()) == 48, f"{off.stdout!r} vs {on.stdout!r}\n{on.stderr}")
    expect("bad --speculative names the flag and the value", run(b, *gen, "--speculative", "on"), EX_USAGE,
           "--speculative", '"on"', "auto or off")
    r = run(b, *gen, env={"MOESERVE_SPECULATIVE": "off"})
    case("MOESERVE_SPECULATIVE=off is honoured", r.returncode == 0 and "speculation off" in r.stderr
         and r.stdout == off.stdout, r.stderr)
    r = run(b, *gen, "--speculative", "auto", env={"MOESERVE_SPECULATIVE": "off"})
    case("the flag wins over MOESERVE_SPECULATIVE", r.returncode == 0 and "speculation auto: " in r.stderr, r.stderr)
    expect("a bad MOESERVE_SPECULATIVE is refused", run(b, *gen, env={"MOESERVE_SPECULATIVE": "maybe"}),
           EX_USAGE, "--speculative", '"maybe"')
    lp = os.path.join(os.path.dirname(base), "spec-logits.f32")
    r = run(b, *gen, "--logits-out", lp)
    case("--logits-out takes the single-sequence path, the same ids",
         r.returncode == 0 and "not used with --logits-out" in r.stderr and r.stdout == off.stdout, r.stderr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--moeserve", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    b = a.moeserve
    os.makedirs(a.workdir, exist_ok=True)
    base = os.path.join(a.workdir, "base")
    shutil.rmtree(base, ignore_errors=True)  # a stale file must not change a case
    gptoss_ckpt.write_checkpoint(base, gptoss_ckpt.preset_params("tiny-bf16"))
    mx = os.path.join(a.workdir, "mxfp4")
    gptoss_ckpt.write_checkpoint(mx, gptoss_ckpt.preset_params("mxfp4-ragged"))
    with open(os.path.join(base, "config.json")) as f:
        vocab = json.load(f)["vocab_size"]

    # --- help and usage ---
    expect("help", run(b, "--help"), EX_OK, "generate", "inspect", "Exit codes")
    expect("generate --help", run(b, "generate", "--help"), EX_OK, "--tokens", "--logits-out", "--threads",
           "--speculative MODE", "MOESERVE_SPECULATIVE")
    expect("inspect --help", run(b, "inspect", "--help"), EX_OK, "--model")
    expect("no command", run(b), EX_USAGE)
    expect("unknown command", run(b, "frobnicate"), EX_USAGE, "frobnicate")
    expect("missing --tokens", run(b, "generate", "--model", base), EX_USAGE, "--tokens")
    expect("bad --tokens", run(b, "generate", "--model", base, "--tokens", "1,x"), EX_USAGE, "1,x")
    expect("bad --threads", run(b, "generate", "--model", base, "--tokens", "1", "--threads", "0"), EX_USAGE, "--threads")
    expect("bad --max-tokens", run(b, "generate", "--model", base, "--tokens", "1", "--max-tokens", "-1"), EX_USAGE)
    expect("--prompt needs the model's tokenizer.json", run(b, "generate", "--model", base, "--prompt", "hi"),
           EX_NOINPUT, "tokenizer.json")
    expect("--tokens and --prompt together", run(b, "generate", "--model", base, "--prompt", "hi", "--tokens", "1"),
           EX_USAGE, "one of them")
    expect("unknown kernel set", run(b, "inspect", "--model", base, "--kernels", "sse9"), EX_USAGE, "sse9", "ref")
    expect("stray argument", run(b, "inspect", "--model", base, "extra"), EX_USAGE, "extra")

    # --- the rocm backend: no GPU here (the lent machine has one: skipped there) ---
    r = run(b, "generate", "--model", base, "--tokens", "1", "--backend", "rocm")
    if "no ROCm/HIP device" in r.stderr or r.returncode != 0:
        expect("--backend rocm without a GPU exits 69 and says so", r, EX_UNAVAILABLE,
               "no ROCm/HIP device")
        expect("serve --backend rocm without a GPU exits 69 before listening",
               run(b, "serve", "--model", base, "--backend", "rocm", "--port", "18089"),
               EX_UNAVAILABLE, "no ROCm/HIP device")
    expect("bad --device", run(b, "generate", "--model", base, "--tokens", "1", "--device", "x"),
           EX_USAGE, "--device")
    expect("--device past the model's one device", run(b, "generate", "--model", base, "--tokens", "1",
                                                      "--backend", "rocm-sim", "--device", "1"),
           EX_UNAVAILABLE, "device 1")
    r = run(b, "generate", "--model", base, "--tokens", "1", "--backend", "rocm-sim",
            env={"MOESERVE_SIM_MEMORY": "1000"})
    case("a model larger than the device's free memory is refused before loading, both sizes named",
         r.returncode != 0 and "MiB free" in r.stderr and "weights take" in r.stderr, r.stderr)
    r1 = run(b, "generate", "--model", mx, "--tokens", "3,1,4", "--max-tokens", "4", "--ignore-eos")
    r2 = run(b, "generate", "--model", mx, "--tokens", "3,1,4", "--max-tokens", "4", "--ignore-eos",
             "--backend", "rocm-sim")
    case("rocm-sim generates what the CPU generates", r1.returncode == 0 and r1.stdout == r2.stdout,
         f"{r1.stdout!r} vs {r2.stdout!r}\n{r2.stderr}")

    serve_on_rocm_sim(b, mx)

    # --- generate contract ---
    lp = os.path.join(a.workdir, "logits.f32")
    r = run(b, "generate", "--model", base, "--tokens", "3,1,4,1,5", "--max-tokens", "7", "--ignore-eos",
            "--logits-out", lp)
    ids = r.stdout.strip().splitlines()[-1].split() if r.stdout.strip() else []
    size = os.path.getsize(lp) if os.path.exists(lp) else -1
    case("generate prints max-tokens ids and writes [T x V] float32 logits",
         r.returncode == 0 and len(ids) == 7 and all(0 <= int(i) < vocab for i in ids) and size == 5 * vocab * 4,
         f"rc {r.returncode}, ids {ids}, logits bytes {size}\n{r.stderr}")
    r0 = run(b, "generate", "--model", base, "--tokens", "3,1,4,1,5", "--max-tokens", "0", "--logits-out", lp)
    case("--max-tokens 0 prints an empty last line", r0.returncode == 0 and r0.stdout == "\n", repr(r0.stdout))
    r = run(b, "generate", "--model", base, "--tokens", "3,1,4,1,5", "--max-tokens", "7", "--ignore-eos",
            env={"MOESERVE_KERNELS": "ref", "MOESERVE_MODEL": "/nonexistent"})
    case("MOESERVE_KERNELS=ref gives the same ids", r.returncode == 0 and r.stdout.split() == ids, r.stderr)
    r = run(b, "generate", "--tokens", "1", "--max-tokens", "1", env={"MOESERVE_MODEL": base})
    case("MOESERVE_MODEL is the default --model", r.returncode == 0, r.stderr)

    # eos: make the first new id of the continuation an eos id; generation
    # must stop right after emitting it.
    stop_at = next(i for i in range(len(ids)) if ids[i] not in ids[:i] and i >= 1) if len(set(ids)) > 1 else None
    if stop_at is None:
        case("eos stops generation", False, f"continuation {ids} has no usable id")
    else:
        eosd = copy_model(base, os.path.join(a.workdir, "eos"))
        edit_config(eosd, eos_token_id=[int(ids[stop_at])])
        r = run(b, "generate", "--model", eosd, "--tokens", "3,1,4,1,5", "--max-tokens", "7")
        got = r.stdout.strip().split()
        case("eos stops generation (eos id included, nothing after)", r.returncode == 0 and got == ids[:stop_at + 1],
             f"got {got}, want {ids[:stop_at + 1]}")
        r = run(b, "generate", "--model", eosd, "--tokens", "3,1,4,1,5", "--max-tokens", "7", "--ignore-eos")
        case("--ignore-eos goes on", r.stdout.strip().split() == ids, r.stdout)
        r = run(b, "generate", "--model", eosd, "--tokens", "3,1,4,1,5", "--max-tokens", "7", "--speculative", "off")
        case("eos stops the single-sequence path alike", r.returncode == 0 and r.stdout.strip().split() == got,
             f"{r.stdout!r} vs {got}")

    generate_speculative(b, base)

    d = copy_model(base, os.path.join(a.workdir, "bad-eos"))
    edit_config(d, eos_token_id=[1, vocab + 5])
    expect("eos id outside the vocabulary", run(b, "inspect", "--model", d), EX_DATAERR, "eos_token_id")
    expect("token id out of range", run(b, "generate", "--model", base, "--tokens", f"1,{vocab}"), EX_DATAERR,
           f"token id {vocab}")

    # --- model folder and config errors ---
    expect("missing model folder", run(b, "inspect", "--model", os.path.join(a.workdir, "nope")), EX_NOINPUT,
           "config.json")
    d = copy_model(base, os.path.join(a.workdir, "badcfg"))
    edit_config(d, num_key_value_heads=3)
    expect("heads not a multiple of kv heads", run(b, "inspect", "--model", d), EX_DATAERR,
           "num_key_value_heads", "3")
    d = copy_model(base, os.path.join(a.workdir, "badarch"))
    edit_config(d, architectures=["LlamaForCausalLM"])
    expect("unsupported architecture", run(b, "inspect", "--model", d), EX_UNAVAILABLE, "LlamaForCausalLM",
           "GptOssForCausalLM")
    d = copy_model(base, os.path.join(a.workdir, "badquant"))
    edit_config(d, quantization_config={"quant_method": "foo"})
    expect("unknown quant_method lists the known ones", run(b, "inspect", "--model", d), EX_UNAVAILABLE,
           "quant_method", "foo", "mxfp4")
    d = copy_model(base, os.path.join(a.workdir, "badrope"))
    edit_config(d, rope_scaling={"rope_type": "longrope", "factor": 4.0})
    expect("unknown rope_type", run(b, "inspect", "--model", d), EX_UNAVAILABLE, "rope_type", "longrope")

    # --- modules_to_not_convert: experts it names load unquantized ---
    nc = ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]
    d = copy_model(base, os.path.join(a.workdir, "mxfp4-not-converted"))
    edit_config(d, quantization_config={"quant_method": "mxfp4",
                                        "modules_to_not_convert": nc + ["model.layers.*.mlp.experts"]})
    r = run(b, "generate", "--model", d, "--tokens", "3,1,4,1,5", "--max-tokens", "7", "--ignore-eos")
    case("mxfp4 method with every expert in modules_to_not_convert = the bf16 model",
         r.returncode == 0 and r.stdout.split() == ids, r.stdout + r.stderr)
    d = copy_model(base, os.path.join(a.workdir, "mxfp4-converted"))
    edit_config(d, quantization_config={"quant_method": "mxfp4", "modules_to_not_convert": nc})
    expect("mxfp4 experts without their blocks are refused", run(b, "inspect", "--model", d), EX_NOINPUT,
           "model.layers.0.mlp.experts.gate_up_proj_blocks")

    # --- checkpoint errors ---
    st = os.path.join(base, "model.safetensors")
    header, blob = read_st(st)
    d = copy_model(base, os.path.join(a.workdir, "missing-tensor"))
    h = dict(header)
    del h["model.layers.0.self_attn.sinks"]
    write_st(os.path.join(d, "model.safetensors"), h, blob)
    expect("missing tensor", run(b, "inspect", "--model", d), EX_NOINPUT, "model.layers.0.self_attn.sinks",
           "missing")
    d = copy_model(base, os.path.join(a.workdir, "wrong-shape"))
    h = json.loads(json.dumps(header))
    t = h["model.layers.0.self_attn.q_proj.weight"]
    t["shape"] = [t["shape"][1], t["shape"][0]]
    write_st(os.path.join(d, "model.safetensors"), h, blob)
    expect("wrong shape", run(b, "inspect", "--model", d), EX_DATAERR, "model.layers.0.self_attn.q_proj.weight",
           "shape")
    d = copy_model(base, os.path.join(a.workdir, "wrong-dtype"))
    h = json.loads(json.dumps(header))
    h["model.layers.0.mlp.experts.gate_up_proj"]["dtype"] = "U8"
    t = h["model.layers.0.mlp.experts.gate_up_proj"]
    t["shape"] = t["shape"][:-1] + [t["shape"][-1] * 2]   # same bytes, U8
    write_st(os.path.join(d, "model.safetensors"), h, blob)
    expect("wrong dtype", run(b, "inspect", "--model", d), EX_DATAERR, "model.layers.0.mlp.experts.gate_up_proj")
    d = copy_model(base, os.path.join(a.workdir, "truncated"))
    with open(os.path.join(d, "model.safetensors"), "r+b") as f:
        f.truncate(os.path.getsize(st) - 100)
    expect("truncated file", run(b, "inspect", "--model", d), EX_DATAERR, "model.safetensors", "truncated")

    # --- bench ---
    r = run(b, "bench", "--model", base, "--prompt-tokens", "40", "--decode-tokens", "4", "--json")
    # numbers: present, finite (json.loads would take NaN/Infinity) and >= 0
    nums = ["prefill_tokens_per_s", "decode_tokens_per_s", "decode_roofline_share", "batch4_tokens_per_s",
            "batch8_tokens_per_s", "batch16_tokens_per_s", "ttft_s", "kv_bytes_per_token", "peak_rss_bytes",
            "bandwidth_bytes_per_s", "weight_bytes_per_token", "threads",
            "load_s", "load_peak_rss_bytes", "weight_bytes", "peak_rss_over_weight_bytes",
            "decode_step_s", "decode_bytes_per_token", "decode_roofline_share_static",
            "decode_experts_per_layer", "decode_bandwidth_bytes_per_s", "bandwidth_min_bytes_per_s",
            "prefill_tokens", "prefill_flop_per_token", "prefill_gflops", "onednn_gflops",
            "onednn_gflops_hidden", "onednn_gflops_gate_up", "prefill_over_onednn",
            "targets_passed", "targets", "decode_arith_gflops", "decode_arith_gflops_1thread"]
    for n in (4, 8, 16):
        nums += [f"batch{n}_{k}" for k in ("step_s", "bytes_per_step", "bytes_per_step_static",
                                           "experts_per_layer", "roofline_share", "bandwidth_bytes_per_s",
                                           "arith_gflops", "arith_gflops_1thread")]
    flags = ["pass_decode_b1", "pass_decode_b8", "pass_decode_b16", "pass_prefill", "pass_load_time",
             "pass_load_rss"]
    try:
        j = json.loads(r.stdout.strip().splitlines()[-1])
        bad = [k for k in nums if not (isinstance(j.get(k), (int, float)) and not isinstance(j[k], bool)
                                       and math.isfinite(j[k]) and j[k] >= 0)]
        bad += [k for k in flags if not isinstance(j.get(k), bool)]
        ok = (r.returncode == 0 and not bad and j["decode_roofline_share"] > 0
              and j["decode_tokens_per_s"] > 0 and j["batch16_tokens_per_s"] > 0 and j["ttft_s"] > 0
              and j["bandwidth_bytes_per_s"] > 1e8 and j["kernels"] in ("ref", "avx2", "avx512", "amx")
              and j["bytes_source"] in ("counter", "static") and j["targets"] == 6
              and j["load_s"] > 0 and j["weight_bytes"] > 0 and j["prefill_gflops"] > 0
              and j["prefill_tokens"] == 40
              # the arithmetic probe ran next to every decode run, on all threads and on one
              and all(j[k] > 0 for k in ("decode_arith_gflops", "decode_arith_gflops_1thread",
                                         "batch16_arith_gflops", "batch16_arith_gflops_1thread")))
        # one decode token streams exactly top-k experts per layer
        with open(os.path.join(base, "config.json")) as f:
            top_k = json.load(f)["num_experts_per_tok"]
        ok = ok and (j["bytes_source"] != "counter" or abs(j["decode_experts_per_layer"] - top_k) < 0.01)
    except (ValueError, IndexError, KeyError, TypeError):
        ok, bad = False, []
    case("bench prints one JSON line with every key", ok, f"bad keys {bad}\n" + r.stdout[-600:] + r.stderr)
    r = run(b, "bench", "--model", base, "--prompt-tokens", "8", "--decode-tokens", "3", "--json",
            "--baseline", "ref", "--baseline-tokens", "3")
    try:
        j = json.loads(r.stdout.strip().splitlines()[-1])
        ok = (r.returncode == 0 and j["baseline_kernels"] == "ref"
              and all(math.isfinite(j[k]) and j[k] > 0 for k in
                      ("baseline_decode_tokens_per_s", "baseline_batch8_tokens_per_s", "speedup_decode",
                       "speedup_batch8")))
    except (ValueError, IndexError, KeyError, TypeError):
        ok = False
    case("bench --baseline ref prints the speedups", ok, r.stdout[-600:] + r.stderr)
    expect("bench --baseline with an unknown set", run(b, "bench", "--model", base, "--baseline", "nope"),
           EX_USAGE, "nope")
    # decode and prefill at depth (bench-context.c)
    r = run(b, "bench", "--model", base, "--prompt-tokens", "16", "--decode-tokens", "3", "--json",
            "--context", "40,100")
    try:
        j = json.loads(r.stdout.strip().splitlines()[-1])
        keys = [f"ctx{n}_{k}" for n in (40, 100) for k in ("prefill_tokens_per_s", "prefill_over_short")]
        keys += [f"ctx{n}_batch{b_}_{k}" for n in (40, 100) for b_ in (1, 8)
                 for k in ("tokens_per_s", "over_short", "bytes_per_step", "kv_bytes_per_step",
                           "roofline_share")]
        bad = [k for k in keys if not (isinstance(j.get(k), (int, float)) and j[k] > 0)]
        # the KV a step reads: every sequence its context, a sliding layer its window (K and V
        # at the dtype the JSON names: bf16 by default)
        with open(os.path.join(base, "config.json")) as f:
            cfg = json.load(f)
        kvd = cfg["num_key_value_heads"] * cfg["head_dim"]

        def kv_read(n, batch):
            seen = [min(n, cfg["sliding_window"]) if t == "sliding_attention" else n
                    for t in cfg["layer_types"]]
            return batch * sum(seen) * kvd * 2 * 2
        full = sum(t == "full_attention" for t in cfg["layer_types"])
        ok = (r.returncode == 0 and not bad and j.get("kv_dtype") == "bf16"
              and (j.get("kv_tokens_per_gib") == round(2 ** 30 / (full * kvd * 2 * 2)) if full
                   else j.get("kv_tokens_per_gib") == 0)
              and all(j[f"ctx{n}_batch{b_}_kv_bytes_per_step"] == kv_read(n, b_)
                      for n in (40, 100) for b_ in (1, 8))
              and j["ctx40_batch8_bytes_per_step"] > j["ctx40_batch8_kv_bytes_per_step"])
    except (ValueError, IndexError, KeyError, TypeError):
        ok, bad = False, []
    case("bench --context prints decode and prefill at each depth", ok,
         f"bad keys {bad}\n" + r.stdout[-600:] + r.stderr)
    # one layer's attention alone (bench-attention.c): every depth, batch and dtype timed
    r = run(b, "bench", "--model", base, "--context", "40", "--attention")
    try:
        j = json.loads(r.stdout.strip().splitlines()[-1])
        # bf16p (bf16 products) and its prefill chunk where the kernel has them
        bf16p = "attn_ctx40_batch1_bf16p_ms" in j
        dts = ("f32", "bf16", "fp8") + (("bf16p",) if bf16p else ())
        keys = [f"attn_ctx40_batch{b_}_{t}_ms" for b_ in (1, 8) for t in dts]
        keys += ["attn_ctx40_prefill_bf16_ms"] + (["attn_ctx40_prefill_bf16p_ms"] if bf16p else [])
        bad = [k for k in keys if not (isinstance(j.get(k), (int, float)) and j[k] > 0)]
        rows = [ln for ln in r.stdout.splitlines() if "GB/s of KV" in ln and "roofline share" in ln]
        ok = (r.returncode == 0 and not bad and len(rows) == 2 * len(dts) and bool(j.get("attention_kernel"))
              and bf16p == (j["attention_kernel"] == "avx512bf16-attn"))
    except (ValueError, IndexError, KeyError, TypeError):
        ok, bad = False, []
    case("bench --context --attention times one layer's attention at each depth", ok,
         f"bad keys {bad}\n" + r.stdout[-600:] + r.stderr)
    expect("bench --attention without --context", run(b, "bench", "--model", base, "--attention"),
           EX_USAGE, "--attention")
    for arg, needle in (("0", "--context"), ("5,6,7,8,9", "--context"), ("12,x", "--context")):
        expect(f"bench --context {arg}", run(b, "bench", "--model", base, "--context", arg), EX_USAGE,
               needle)
    expect("bench --context past the model's context",
           run(b, "bench", "--model", base, "--context", "16000000"), EX_USAGE,
           "passes the model's context")
    # structured outputs (bench-structured.c) on the shipped default model, its tokenizer
    default = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models", "default", "bf16")
    r = run(b, "bench", "--structured", "--model", default, "--decode-tokens", "4", "--json")
    try:
        j = json.loads(r.stdout.strip().splitlines()[-1])
        names = ("flat", "nested", "props50", "tree", "strings", "json_object")
        ok = (r.returncode == 0 and j["vocab"] > 0 and j["targets"] == 4
              and all(j[f"{n}_compile_ms"] > 0 and j[f"{n}_states"] > 0 and j[f"{n}_tokens_per_seq"] > 0
                      and 0 < j[f"{n}_mask_us_median"] <= j[f"{n}_mask_us_p99"] for n in names)
              and 0 < j["mask_us_median"] <= j["mask_us_p99"]
              and all(j[f"batch{n}_tokens_per_s"] > 0 and j[f"batch{n}_constrained_tokens_per_s"] > 0
                      and j[f"batch{n}_constraint_us_per_token"] > 0 for n in (1, 8)))
    except (ValueError, IndexError, KeyError, TypeError):
        ok = False
    case("bench --structured prints compile, mask and decode figures", ok, r.stdout[-600:] + r.stderr)
    expect("bench --tokenizer without --structured", run(b, "bench", "--model", base, "--tokenizer", "x"),
           EX_USAGE, "--structured")
    expect("bench --structured without a tokenizer", run(b, "bench", "--structured", "--model", base),
           EX_USAGE, "--tokenizer")
    # the device bench (bench-device.c) on the host model of the GPU: its own keys, the copy
    # kernel's bandwidth, the counting shim's bytes (one token: exactly top-k experts a layer)
    r = run(b, "bench", "--model", base, "--backend", "rocm-sim", "--prompt-tokens", "4",
            "--decode-tokens", "3", "--json")
    try:
        j = json.loads(r.stdout.strip().splitlines()[-1])
        with open(os.path.join(base, "config.json")) as f:
            top_k = json.load(f)["num_experts_per_tok"]
        pos = ["bandwidth_bytes_per_s", "prefill_tokens_per_s", "ttft_s", "decode_tokens_per_s",
               "decode_roofline_share", "weight_bytes", "load_s"]
        pos += [f"batch{n}_{k}" for n in (1, 2, 4) for k in ("tokens_per_s", "step_s", "bytes_per_step",
                                                              "roofline_share")]
        bad = [k for k in pos if not (isinstance(j.get(k), (int, float)) and math.isfinite(j[k]) and j[k] > 0)]
        ok = (r.returncode == 0 and not bad and j["backend"] == "rocm-sim" and j["device"]
              and j["bytes_source"] == "counter" and j["bandwidth_copy_bytes"] == 64 << 20
              and j["prefill_tokens"] == 4 and abs(j["batch1_experts_per_layer"] - top_k) < 1e-9
              and j["batch1_bytes_per_step"] <= j["batch2_bytes_per_step"] <= j["batch4_bytes_per_step"])
    except (ValueError, IndexError, KeyError, TypeError):
        ok, bad = False, []
    case("bench --backend rocm-sim prints the device bench's JSON line", ok,
         f"bad keys {bad}\n" + r.stdout[-600:] + r.stderr)
    expect("bench --baseline on a device backend",
           run(b, "bench", "--model", base, "--backend", "rocm-sim", "--baseline", "ref"), EX_USAGE,
           "--baseline", "rocm-sim")

    # --- the benchmark checkpoints' writer, shrunk: every format loads and runs ---
    case("bench_ckpt encoders match the reference encoders", bench_ckpt.selftest() == [])
    for fmt, scheme in (("mxfp4", "mxfp4"), ("gptq", "gptq"), ("quark", "quark-w4a8")):
        d = os.path.join(a.workdir, "bench-" + fmt)
        rc = bench_ckpt.main(["--format", fmt, "--out", d, "--layers", "2", "--experts", "4", "--hidden", "64",
                              "--intermediate", "64", "--heads", "4", "--kv-heads", "2", "--head-dim", "16",
                              "--vocab", "256", "--jobs", "1"])
        r = run(b, "inspect", "--model", d)
        g = run(b, "generate", "--model", d, "--tokens", "1,2,3", "--max-tokens", "2", "--ignore-eos")
        case(f"bench_ckpt --format {fmt} loads and generates",
             rc == 0 and r.returncode == 0 and scheme in r.stdout and g.returncode == 0
             and len(g.stdout.split()) >= 2, r.stdout[-800:] + r.stderr + g.stderr)

    # --preset 20b: gpt-oss-20b's shape, here one layer of four experts over a small vocabulary
    d = os.path.join(a.workdir, "bench-20b")
    rc = bench_ckpt.main(["--format", "mxfp4", "--out", d, "--preset", "20b", "--layers", "1",
                          "--experts", "4", "--vocab", "256", "--jobs", "1"])
    try:
        with open(os.path.join(d, "config.json")) as f:
            c = json.load(f)
        shape = {k: c[k] for k in ("hidden_size", "intermediate_size", "num_attention_heads",
                                   "num_key_value_heads", "head_dim", "num_hidden_layers",
                                   "num_local_experts", "num_experts_per_tok", "sliding_window")}
    except (OSError, ValueError, KeyError) as e:
        shape = str(e)
    want = {"hidden_size": 2880, "intermediate_size": 2880, "num_attention_heads": 64,
            "num_key_value_heads": 8, "head_dim": 64, "num_hidden_layers": 1, "num_local_experts": 4,
            "num_experts_per_tok": 4, "sliding_window": 128}
    r = run(b, "inspect", "--model", d)
    case("bench_ckpt --preset 20b: the 20b shape, size flags override it, it loads",
         rc == 0 and shape == want and r.returncode == 0, f"{shape}\n{r.stdout[-400:]}{r.stderr}")
    shutil.rmtree(d, ignore_errors=True)

    # --- inspect ---
    r = run(b, "inspect", "--model", mx)
    out = r.stdout
    with open(os.path.join(mx, "config.json")) as f:
        c = json.load(f)
    layer = 2 * c["num_key_value_heads"] * c["head_dim"] * 4
    full = sum(t == "full_attention" for t in c["layer_types"])
    def kv_line(dtype, layer):
        return (f"kv cache:      {dtype}, {layer} bytes a token a layer; {layer * full} a token of "
                f"context ({full} full layer{'' if full == 1 else 's'}), "
                f"{round(2 ** 30 / (layer * full))} tokens per GiB")
    case("inspect prints the KV cache's bytes a token and tokens per GiB (bf16 by default)",
         kv_line("bf16", layer // 2) in out, out)
    r32 = run(b, "inspect", "--model", mx, "--kv-dtype", "f32")
    case("inspect --kv-dtype f32: twice the bytes a token", kv_line("f32", layer) in r32.stdout,
         r32.stdout + r32.stderr)
    rx = run(b, "inspect", "--model", mx, "--exact")
    case("inspect --exact: auto is f32 (the reference's logits)", kv_line("f32", layer) in rx.stdout,
         rx.stdout + rx.stderr)
    rxb = run(b, "inspect", "--model", mx, "--exact", "--kv-dtype", "bf16")
    case("inspect --exact --kv-dtype bf16: the flag wins", kv_line("bf16", layer // 2) in rxb.stdout,
         rxb.stdout + rxb.stderr)
    # fp8: a code per value and a scale byte per position and kv head
    fp8 = 2 * c["num_key_value_heads"] * (c["head_dim"] + 1)
    r8 = run(b, "inspect", "--model", mx, "--kv-dtype", "fp8")
    case("inspect --kv-dtype fp8: a byte a value and one a head", kv_line("fp8", fp8) in r8.stdout,
         r8.stdout + r8.stderr)
    expect("--kv-dtype fp16 is refused, naming the choices",
           run(b, "inspect", "--model", mx, "--kv-dtype", "fp16"), EX_USAGE, "--kv-dtype", "fp8")
    # --attn-products: what inspect says it computes, and the refusals
    def products(r):
        line = [l for l in r.stdout.splitlines() if l.startswith("attn products:")]
        return line[0].split()[2] if line else None
    hw = "avx512_bf16" in open("/proc/cpuinfo").read()
    case("inspect: bf16 attention products by default where the CPU has AVX512-BF16",
         products(r) == ("bf16" if hw else "f32"), out)
    case("inspect --attn-products f32 / --exact / --kv-dtype f32: f32 products",
         products(run(b, "inspect", "--model", mx, "--attn-products", "f32")) == "f32"
         and products(rx) == "f32" and products(r32) == "f32")
    case("inspect --kernels ref --attn-products bf16: the reference has them",
         products(run(b, "inspect", "--model", mx, "--kernels", "ref", "--attn-products", "bf16")) == "bf16")
    expect("--attn-products bf16 with --exact is refused, naming both",
           run(b, "inspect", "--model", mx, "--exact", "--attn-products", "bf16"), EX_USAGE,
           "--attn-products bf16", "--exact")
    expect("--attn-products bf16 on a kernel without them is refused, naming it",
           run(b, "inspect", "--model", mx, "--kernels", "avx2", "--attn-products", "bf16"), EX_USAGE,
           "avx2-attn has no bf16 products")
    expect("--attn-products bf16 on rocm-sim is refused",
           run(b, "inspect", "--model", mx, "--backend", "rocm-sim", "--attn-products", "bf16"),
           EX_UNAVAILABLE, "--attn-products bf16: not on the rocm-sim backend")
    expect("--attn-products fp16 is refused, naming the choices",
           run(b, "inspect", "--model", mx, "--attn-products", "fp16"), EX_USAGE, "--attn-products", "bf16")
    g32, g16, g8 = (run(b, "generate", "--model", mx, "--backend", "rocm-sim", "--tokens", "1,2,3",
                        "--max-tokens", "2", "--ignore-eos", "--kv-dtype", t)
                    for t in ("f32", "bf16", "fp8"))
    case("--kv-dtype bf16 and fp8 run on rocm-sim too",
         all(g.returncode == 0 and len(g.stdout.split()) >= 2 for g in (g32, g16, g8)),
         g16.stdout[-300:] + g16.stderr + g8.stdout[-300:] + g8.stderr)
    case("inspect names schemes, kernels and bytes",
         r.returncode == 0 and "quantization:  mxfp4" in out and "-mxfp4" in out and "unquantized" in out
         and "experts gate_up" in out and "total weight bytes" in out and "GptOssForCausalLM" in out,
         out + r.stderr)

    n_ok = sum(results)
    print(f"cli: {n_ok} passed, {len(results) - n_ok} failed")
    return 0 if n_ok == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
