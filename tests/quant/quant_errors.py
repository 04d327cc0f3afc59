#!/usr/bin/python3
"""Corrupt quantized checkpoints: each is refused at load with a message
naming the tensor (or field) and the problem, never loaded as garbage.

    /usr/bin/python3 tests/quant/quant_errors.py --moeserve BIN --workdir DIR

Starts from good checkpoints written by tools/gptoss_ckpt.py (QUANT_PRESETS),
edits one tensor's bytes or header entry or one config field, and runs
`moeserve inspect`. Last line: `quant-errors: N passed, M failed`.
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import gptoss_ckpt  # noqa: E402

EX_DATAERR, EX_NOINPUT, EX_UNAVAILABLE = 65, 66, 69
results = []


def read_st(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    return json.loads(data[8:8 + n]), bytearray(data[8 + n:])


def write_st(path, header, blob):
    hj = json.dumps(header).encode()
    hj += b" " * (-len(hj) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)) + hj + bytes(blob))


def shard_of(model, tensor):
    idx = os.path.join(model, "model.safetensors.index.json")
    if os.path.exists(os.path.join(model, "model.safetensors")):
        return os.path.join(model, "model.safetensors")
    with open(idx) as f:
        return os.path.join(model, json.load(f)["weight_map"][tensor])


def variant(base, name, workdir):
    d = os.path.join(workdir, name)
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(base, d)
    return d


def poke(model, tensor, index, raw):
    """Overwrite element `index` of `tensor` with the bytes `raw`."""
    path = shard_of(model, tensor)
    h, blob = read_st(path)
    b0 = h[tensor]["data_offsets"][0] + index * len(raw)
    blob[b0:b0 + len(raw)] = raw
    write_st(path, h, blob)


def edit_header(model, tensor, fn):
    path = shard_of(model, tensor)
    h, blob = read_st(path)
    fn(h)
    write_st(path, h, blob)


def edit_config(model, fn):
    p = os.path.join(model, "config.json")
    with open(p) as f:
        c = json.load(f)
    fn(c)
    with open(p, "w") as f:
        json.dump(c, f)


def expect(binary, name, model, code, *needles):
    r = subprocess.run([binary, "inspect", "--model", model], capture_output=True, text=True, timeout=120)
    missing = [n for n in needles if n not in r.stderr]
    ok = r.returncode == code and not missing
    results.append(ok)
    print(f"{'PASS' if ok else 'FAIL'}  {name}" + ("" if ok else f"  -- exit {r.returncode} (want {code}), "
                                                      f"missing {missing}: {r.stderr.strip()[-400:]}"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--moeserve", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    b, w = a.moeserve, a.workdir
    os.makedirs(w, exist_ok=True)
    base = {}
    for p in ("gptq-4b-g64-asym-v1-descact", "awq-zp-g64-defuser", "quark-w4a4", "quark-fp8-static"):
        base[p] = os.path.join(w, "base-" + p)
        gptoss_ckpt.write_checkpoint(base[p], gptoss_ckpt.preset_params(p))

    # --- GPTQ ---
    g = base["gptq-4b-g64-asym-v1-descact"]
    t = "model.layers.0.mlp.experts.1.gate_up_proj.g_idx"
    d = variant(g, "gidx-range", w)
    poke(d, t, 7, struct.pack("<i", 2))   # K = 96, group 64: groups 0 and 1 only
    expect(b, "g_idx out of range", d, EX_DATAERR, t, "g_idx[7] = 2", "outside [0, 2)")
    d = variant(g, "gidx-negative", w)
    poke(d, t, 0, struct.pack("<i", -1))
    expect(b, "negative g_idx", d, EX_DATAERR, t, "g_idx[0] = -1")
    d = variant(g, "gptq-nan-scale", w)
    t = "model.layers.1.self_attn.o_proj.scales"
    poke(d, t, 3, struct.pack("<H", 0x7E00))  # an F16 NaN
    expect(b, "NaN GPTQ scale", d, EX_DATAERR, t, "nan")
    d = variant(g, "gptq-inf-scale", w)
    poke(d, t, 0, struct.pack("<H", 0x7C00))
    expect(b, "infinite GPTQ scale", d, EX_DATAERR, t, "inf")
    d = variant(g, "gptq-wrong-shape", w)
    t = "model.layers.0.self_attn.k_proj.qweight"

    def halve(h):
        e = h[t]
        e["shape"] = [e["shape"][0] // 2, e["shape"][1]]
        e["data_offsets"][1] = e["data_offsets"][0] + (e["data_offsets"][1] - e["data_offsets"][0]) // 2
    edit_header(d, t, halve)
    expect(b, "qweight of the wrong shape", d, EX_DATAERR, t, "shape")
    d = variant(g, "gptq-no-gidx", w)
    t = "model.layers.0.self_attn.v_proj.g_idx"
    edit_header(d, t, lambda h: h.pop(t))
    expect(b, "desc_act without g_idx", d, EX_NOINPUT, t, "desc_act")
    d = variant(g, "gptq-bits-mismatch", w)
    edit_config(d, lambda c: c["quantization_config"].update(bits=8))
    expect(b, "bits that do not match the tensors", d, EX_DATAERR, "qweight", "shape")
    d = variant(g, "gptq-qzeros-dtype", w)
    t = "model.layers.0.self_attn.q_proj.qzeros"

    def to_f32(h):
        h[t]["dtype"] = "F32"
    edit_header(d, t, to_f32)
    expect(b, "qzeros of the wrong dtype", d, EX_DATAERR, t, "F32", "I32")

    # --- AWQ ---
    d = variant(base["awq-zp-g64-defuser"], "awq-group", w)
    edit_config(d, lambda c: c["quantization_config"].update(group_size=48))
    expect(b, "AWQ K not a multiple of the group", d, EX_UNAVAILABLE, "group_size 48")
    d = variant(base["awq-zp-g64-defuser"], "awq-nan", w)
    t = "model.layers.0.mlp.experts.2.up_proj.scales"
    poke(d, t, 5, struct.pack("<H", 0xFE00))
    expect(b, "NaN AWQ scale", d, EX_DATAERR, t, "nan")

    # --- Quark MXFP4 ---
    q4 = base["quark-w4a4"]
    d = variant(q4, "e8m0-ff", w)
    t = "model.layers.1.mlp.experts.3.down_proj.weight_scale"
    poke(d, t, 4, b"\xff")
    expect(b, "E8M0 byte 0xFF", d, EX_DATAERR, t, "0xFF", "NaN")
    d = variant(q4, "fp4-wrong-shape", w)
    t = "model.layers.0.self_attn.q_proj.weight_scale"

    def widen(h):
        e = h[t]
        n, g4 = e["shape"]
        e["shape"] = [n // 2, g4 * 2]
    edit_header(d, t, widen)
    expect(b, "fp4 weight_scale of the wrong shape", d, EX_DATAERR, t, "shape")
    d = variant(q4, "fp4-unquantized-tensor", w)
    # the config now says attention is quantized, but the tensors are BF16
    edit_config(d, lambda c: c["quantization_config"].update(exclude=["lm_head", "model.embed_tokens"]))
    r_model = d

    # --- Quark FP8 ---
    q8 = base["quark-fp8-static"]
    d = variant(q8, "fp8-nan-weight", w)
    t = "model.layers.0.mlp.experts.4.gate_up_proj.weight"
    poke(d, t, 11, b"\x7f")
    expect(b, "FP8 NaN weight byte", d, EX_DATAERR, t, "NaN")
    d = variant(q8, "fp8-neg-input-scale", w)
    t = "model.layers.1.self_attn.o_proj.input_scale"
    poke(d, t, 0, struct.pack("<f", -0.5))
    expect(b, "negative input_scale", d, EX_DATAERR, t, "-0.5", "positive")
    d = variant(q8, "fp8-nan-weight-scale", w)
    t = "model.layers.0.self_attn.k_proj.weight_scale"
    poke(d, t, 0, struct.pack("<f", float("nan")))
    expect(b, "NaN weight_scale", d, EX_DATAERR, t, "nan")
    d = variant(q8, "fp8-missing-input-scale", w)
    t = "model.layers.0.mlp.experts.0.down_proj.input_scale"
    edit_header(d, t, lambda h: h.pop(t))
    expect(b, "missing input_scale", d, EX_NOINPUT, t, "missing")
    d = variant(q8, "fp8-vector-input-scale", w)
    t = "model.layers.0.self_attn.v_proj.input_scale"

    def vec(h):
        e = h[t]
        e["shape"] = [1]
    edit_header(d, t, vec)
    r = subprocess.run([b, "inspect", "--model", d], capture_output=True, text=True)
    results.append(r.returncode == 0)
    print(f"{'PASS' if r.returncode == 0 else 'FAIL'}  a one-element input_scale [1] is a scalar"
          + ("" if r.returncode == 0 else "  -- " + r.stderr.strip()))

    # spec says quantized but the tensors are plain BF16: refused by dtype
    expect(b, "fp4 spec over a BF16 tensor", r_model, EX_DATAERR, ".weight\" has dtype BF16, expected U8")

    n_ok = sum(results)
    print(f"quant-errors: {n_ok} passed, {len(results) - n_ok} failed")
    return 0 if n_ok == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
