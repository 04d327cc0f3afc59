#!/usr/bin/python3
"""The GGUF twin of a native-MXFP4 gpt-oss checkpoint, for llama.cpp.

    /usr/bin/python3 tools/gguf_twin.py CKPT_DIR OUT.gguf [--dense q8_0|bf16|f32]
    /usr/bin/python3 tools/gguf_twin.py --selftest

Reads the checkpoint tools/bench_ckpt.py --format mxfp4 writes (or any
Hugging Face gpt-oss checkpoint in its native MXFP4 layout, sharded or not)
and writes the same weights as llama.cpp's "gpt-oss" architecture reads
them, in the form of llama.cpp's default gpt-oss GGUF: experts stay MXFP4
(their bytes re-ordered, not re-quantized), 2-D dense weights (attention,
embeddings, head) Q8_0, the router and every 1-D tensor F32.  So llama.cpp
and moeserve run one model side by side (tools/vs-llamacpp.sh).

Layout facts, from llama.cpp's converter (convert_hf_to_gguf, GptOssModel)
and ggml's block formats:
  - ggml's block_mxfp4 is {e8m0 scale byte, 16 bytes}; byte j holds element
    j in its low nibble and element j+16 in its high one.  Hugging Face's
    blocks hold elements 2j and 2j+1 in byte j (low, high), with the scales
    in a separate tensor.  The scale byte is the same in both (ggml doubles
    the FP4 table and halves the scale).
  - gate_up_proj interleaves gate and up rows (gate even, up odd); llama.cpp
    keeps them as two tensors.
  - ggml lists dimensions innermost first: a [out, in] matrix is ne=[in, out].
The tokenizer is a stand-in (llama-bench feeds token ids): byte-level tokens
for the 256 bytes, filler names for the rest, the checkpoint's eos and pad
ids as control tokens.

Needs only numpy.
"""

import json
import os
import struct
import sys

import numpy as np

# ggml_type values (ggml.h) and GGUF value types (gguf.md)
F32, Q8_0, BF16, MXFP4 = 0, 8, 30, 39
T_U32, T_I32, T_F32, T_BOOL, T_STR, T_ARR = 4, 5, 6, 7, 8, 9
ALIGN = 32
BLOCK_BYTES = {F32: (1, 4), Q8_0: (32, 34), BF16: (1, 2), MXFP4: (32, 17)}
# general.file_type (llama_ftype) by dense type: MXFP4_MOE for the default
FILE_TYPE = {Q8_0: 38, BF16: 32, F32: 0}


class Checkpoint:
    """The tensors of a safetensors checkpoint, read on demand (mmap)."""

    def __init__(self, path):
        self.where = {}
        files = sorted(f for f in os.listdir(path) if f.endswith(".safetensors"))
        if not files:
            raise SystemExit(f"gguf_twin: no .safetensors in {path}")
        for f in files:
            full = os.path.join(path, f)
            with open(full, "rb") as fh:
                n = struct.unpack("<Q", fh.read(8))[0]
                head = json.loads(fh.read(n))
            for name, info in head.items():
                if name != "__metadata__":
                    self.where[name] = (full, 8 + n, info)
        self.maps = {}

    def get(self, name):
        full, base, info = self.where[name]
        if full not in self.maps:
            self.maps[full] = np.memmap(full, dtype=np.uint8, mode="r")
        a, b = info["data_offsets"]
        raw = self.maps[full][base + a: base + b]
        dt = info["dtype"]
        if dt == "BF16":
            out = (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        elif dt == "F32":
            out = raw.view(np.float32)
        elif dt == "U8":
            out = raw
        else:
            raise SystemExit(f"gguf_twin: {name} has dtype {dt}; expected BF16, F32 or U8")
        return out.reshape(info["shape"])


def q8_0(x):
    """ggml's Q8_0 of the rows of x: blocks of 32, fp16 scale amax/127, codes
    rounded half away from zero (quantize_row_q8_0_ref)."""
    x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, 32)
    d = np.abs(x).max(axis=1, keepdims=True) / 127
    inv = np.where(d == 0, 0, 1 / np.where(d == 0, 1, d))
    v = x * inv
    q = (np.sign(v) * np.floor(np.abs(v) + 0.5)).astype(np.int8)
    out = np.empty((x.shape[0], 34), np.uint8)
    out[:, :2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q.view(np.uint8)
    return out


def mxfp4_blocks(blocks, scales):
    """Hugging Face MXFP4 (blocks [..., n, 16], scales [..., n]) as ggml's
    block_mxfp4 bytes [..., n * 17]."""
    lo, hi = blocks & 0x0F, blocks >> 4
    codes = np.stack([lo, hi], axis=-1).reshape(blocks.shape[:-1] + (32,))
    qs = codes[..., :16] | (codes[..., 16:] << 4)
    out = np.concatenate([scales[..., None], qs], axis=-1)
    return out.reshape(blocks.shape[:-2] + (-1,))


class Tensor:
    def __init__(self, name, ne, ggml_type, make):
        self.name, self.ne, self.type, self.make = name, ne, ggml_type, make
        per, size = BLOCK_BYTES[ggml_type]
        self.nbytes = int(np.prod(ne)) // per * size


def dense(ck, name, kind):
    """A [out, in] weight in the dense type asked for."""
    def make():
        w = ck.get(name)
        if kind == Q8_0:
            return q8_0(w)
        if kind == BF16:
            return (w.view(np.uint32) >> 16).astype(np.uint16)
        return np.ascontiguousarray(w, np.float32)
    return make


def f32(ck, name, fix=lambda a: a):
    return lambda: np.ascontiguousarray(fix(ck.get(name)), np.float32)


def layer_tensors(ck, cfg, i, kind):
    p, b = f"model.layers.{i}.", f"blk.{i}."
    H, E, I = cfg["hidden_size"], cfg["num_local_experts"], cfg["intermediate_size"]
    nq, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    ex = p + "mlp.experts."
    t = [Tensor(b + "attn_norm.weight", [H], F32, f32(ck, p + "input_layernorm.weight")),
         Tensor(b + "post_attention_norm.weight", [H], F32, f32(ck, p + "post_attention_layernorm.weight")),
         Tensor(b + "attn_sinks.weight", [nq], F32, f32(ck, p + "self_attn.sinks"))]
    for short, hf, rows in (("q", "q_proj", nq * hd), ("k", "k_proj", nkv * hd), ("v", "v_proj", nkv * hd)):
        t.append(Tensor(f"{b}attn_{short}.weight", [H, rows], kind, dense(ck, p + f"self_attn.{hf}.weight", kind)))
        t.append(Tensor(f"{b}attn_{short}.bias", [rows], F32, f32(ck, p + f"self_attn.{hf}.bias")))
    t.append(Tensor(b + "attn_output.weight", [nq * hd, H], kind, dense(ck, p + "self_attn.o_proj.weight", kind)))
    t.append(Tensor(b + "attn_output.bias", [H], F32, f32(ck, p + "self_attn.o_proj.bias")))
    t.append(Tensor(b + "ffn_gate_inp.weight", [H, E], F32, f32(ck, p + "mlp.router.weight")))
    t.append(Tensor(b + "ffn_gate_inp.bias", [E], F32, f32(ck, p + "mlp.router.bias")))
    for short, parity in (("gate", 0), ("up", 1)):
        t.append(Tensor(f"{b}ffn_{short}_exps.weight", [H, I, E], MXFP4,
                        lambda par=parity: mxfp4_blocks(ck.get(ex + "gate_up_proj_blocks")[:, par::2],
                                                        ck.get(ex + "gate_up_proj_scales")[:, par::2])))
        t.append(Tensor(f"{b}ffn_{short}_exps.bias", [I, E], F32,
                        f32(ck, ex + "gate_up_proj_bias", lambda a, par=parity: a[:, par::2])))
    t.append(Tensor(b + "ffn_down_exps.weight", [I, H, E], MXFP4,
                    lambda: mxfp4_blocks(ck.get(ex + "down_proj_blocks"), ck.get(ex + "down_proj_scales"))))
    t.append(Tensor(b + "ffn_down_exps.bias", [H, E], F32, f32(ck, ex + "down_proj_bias")))
    return t


def all_tensors(ck, cfg, kind):
    H, V = cfg["hidden_size"], cfg["vocab_size"]
    t = [Tensor("token_embd.weight", [H, V], kind, dense(ck, "model.embed_tokens.weight", kind))]
    for i in range(cfg["num_hidden_layers"]):
        t += layer_tensors(ck, cfg, i, kind)
    t.append(Tensor("output_norm.weight", [H], F32, f32(ck, "model.norm.weight")))
    t.append(Tensor("output.weight", [H, V], kind, dense(ck, "lm_head.weight", kind)))
    return t


# llama.cpp's gpt-oss hyperparameters (GGUF key under the architecture,
# value type, the config.json field they come from)
ARCH_KEYS = [
    ("block_count", T_U32, "num_hidden_layers"), ("context_length", T_U32, "max_position_embeddings"),
    ("embedding_length", T_U32, "hidden_size"), ("feed_forward_length", T_U32, "intermediate_size"),
    ("expert_feed_forward_length", T_U32, "intermediate_size"),
    ("attention.head_count", T_U32, "num_attention_heads"),
    ("attention.head_count_kv", T_U32, "num_key_value_heads"),
    ("attention.key_length", T_U32, "head_dim"), ("attention.value_length", T_U32, "head_dim"),
    ("attention.layer_norm_rms_epsilon", T_F32, "rms_norm_eps"),
    ("attention.sliding_window", T_U32, "sliding_window"), ("rope.freq_base", T_F32, "rope_theta"),
    ("expert_count", T_U32, "num_local_experts"), ("expert_used_count", T_U32, "num_experts_per_tok"),
]


def byte_tokens():
    """GPT-2's byte-to-unicode table: the 256 byte-level token strings."""
    keep = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    extra = [b for b in range(256) if b not in keep]
    names = {b: chr(b) for b in keep}
    names.update({b: chr(256 + n) for n, b in enumerate(extra)})
    return [names[b] for b in range(256)]


def metadata(cfg, dense_kind):
    a = "gpt-oss"
    V = cfg["vocab_size"]
    tokens = byte_tokens() + [f"<tok{i}>" for i in range(256, V)]
    types = [1] * V
    for key, text in (("eos_token_id", "<|return|>"), ("pad_token_id", "<|endoftext|>")):
        if isinstance(cfg.get(key), int) and 256 <= cfg[key] < V:
            tokens[cfg[key]], types[cfg[key]] = text, 3
    rs = cfg.get("rope_scaling") or {}
    kv = [("general.architecture", T_STR, a), ("general.name", T_STR, "moeserve gguf twin"),
          ("general.alignment", T_U32, ALIGN), ("general.file_type", T_U32, FILE_TYPE[dense_kind])]
    kv += [(f"{a}.{key}", t, cfg[src]) for key, t, src in ARCH_KEYS]
    if rs.get("rope_type") == "yarn":
        kv += [(f"{a}.rope.scaling.type", T_STR, "yarn"),
               (f"{a}.rope.scaling.factor", T_F32, rs["factor"]),
               (f"{a}.rope.scaling.original_context_length", T_U32, rs["original_max_position_embeddings"])]
    kv += [("tokenizer.ggml.model", T_STR, "gpt2"), ("tokenizer.ggml.pre", T_STR, "gpt-4o"),
           ("tokenizer.ggml.tokens", T_ARR, (T_STR, tokens)),
           ("tokenizer.ggml.token_type", T_ARR, (T_I32, types)),
           ("tokenizer.ggml.merges", T_ARR, (T_STR, [])),
           ("tokenizer.ggml.add_bos_token", T_BOOL, False)]
    for key, gkey in (("eos_token_id", "eos"), ("pad_token_id", "padding")):
        if isinstance(cfg.get(key), int):
            kv.append((f"tokenizer.ggml.{gkey}_token_id", T_U32, cfg[key]))
    return kv


def pack_str(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def pack_value(t, v):
    if t == T_STR:
        return pack_str(v)
    if t == T_ARR:
        et, items = v
        body = b"".join(pack_value(et, x) for x in items)
        return struct.pack("<IQ", et, len(items)) + body
    return struct.pack({T_U32: "<I", T_I32: "<i", T_F32: "<f", T_BOOL: "<?"}[t], v)


def write(out, kv, tensors):
    head = [b"GGUF", struct.pack("<IQQ", 3, len(tensors), len(kv))]
    head += [pack_str(k) + struct.pack("<I", t) + pack_value(t, v) for k, t, v in kv]
    off = 0
    for t in tensors:
        head.append(pack_str(t.name) + struct.pack("<I", len(t.ne)) +
                    struct.pack(f"<{len(t.ne)}Q", *t.ne) + struct.pack("<IQ", t.type, off))
        off += -(-t.nbytes // ALIGN) * ALIGN
    with open(out + ".partial", "wb") as fh:
        blob = b"".join(head)
        fh.write(blob + b"\0" * (-len(blob) % ALIGN))
        for t in tensors:
            data = np.ascontiguousarray(t.make()).view(np.uint8).reshape(-1)
            if data.size != t.nbytes:
                raise SystemExit(f"gguf_twin: {t.name} made {data.size} bytes, expected {t.nbytes}")
            fh.write(data.tobytes())
            fh.write(b"\0" * (-t.nbytes % ALIGN))
    os.replace(out + ".partial", out)


def ggml_mxfp4_decode(b):
    """ggml's dequantize_row_mxfp4, from its definition (not this file's
    encoder): scale byte e, then qs[j] = element j (low nibble) and j + 16
    (high); value = kvalues_mxfp4[n] (the FP4 values doubled) * 2^(e-127) / 2."""
    kv = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], np.float64)
    b = b.reshape(-1, 17)
    half = np.ldexp(1.0, b[:, 0].astype(np.int64) - 128)[:, None]
    return np.concatenate([kv[b[:, 1:] & 15], kv[b[:, 1:] >> 4]], axis=1) * half


def read_gguf(path):
    """The metadata keys and tensor table of a GGUF file (what the self-test
    checks the writer against)."""
    import mmap
    with open(path, "rb") as fh:
        m = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, m, pos)
        pos += struct.calcsize(fmt)
        return v if len(v) > 1 else v[0]

    def string():
        nonlocal pos
        n = take("<Q")
        pos += n
        return m[pos - n:pos].decode()

    def value(t):
        if t == T_STR:
            return string()
        if t == T_ARR:
            et, n = take("<IQ")
            return [value(et) for _ in range(n)]
        return take({T_U32: "<I", T_I32: "<i", T_F32: "<f", T_BOOL: "<?"}[t])

    assert m[:4] == b"GGUF"
    pos = 4
    version, nt, nkv = take("<IQQ")
    kv = {}
    for _ in range(nkv):
        k = string()
        kv[k] = value(take("<I"))
    tensors = []
    for _ in range(nt):
        name = string()
        nd = take("<I")
        ne = list(struct.unpack_from(f"<{nd}Q", m, pos))
        pos += 8 * nd
        tensors.append((name, ne) + take("<IQ"))
    data = pos + (-pos % ALIGN)
    return version, kv, tensors, data, len(m)


def selftest():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import gptoss_ref  # noqa: E402 (the independent Hugging Face decoder)
    import gptoss_ckpt  # noqa: E402
    import tempfile
    rng = np.random.default_rng(24)
    # MXFP4: the repacked blocks decode, by ggml's definition, to what the
    # Hugging Face blocks decode to by the reference's
    blocks = rng.integers(0, 256, (3, 7, 5, 16), dtype=np.uint8)
    scales = rng.integers(100, 150, (3, 7, 5), dtype=np.uint8)
    got = ggml_mxfp4_decode(mxfp4_blocks(blocks, scales)).reshape(3, 7, 160)
    want = gptoss_ref.dequant_mxfp4(blocks, scales, 160)
    assert np.array_equal(got, want), "mxfp4 repack"
    # Q8_0: codes within +-127, each value within half a step of its code
    # (plus the step's own fp16 rounding, which ggml applies after coding),
    # an all-zero block stays zero, a tie rounds away from zero
    x = (rng.standard_normal((6, 96)) * rng.uniform(1e-3, 10, (6, 1))).astype(np.float32)
    x[2, 32:64] = 0
    x[4, :32] = 0
    x[4, 0], x[4, 1], x[4, 2] = 127.0, 2.5, -2.5
    q = q8_0(x)
    d = q[:, :2].copy().view(np.float16).astype(np.float64)
    c = q[:, 2:].view(np.int8).astype(np.float64)
    err = np.abs(c * d - x.reshape(-1, 32))
    assert np.all(err <= d * (0.5 + 127 * 2.0 ** -11) * (1 + 1e-6)), "q8_0 error over half a step"
    assert np.all(c[2 * 3 + 1] == 0) and d[2 * 3 + 1, 0] == 0, "q8_0 zero block"
    assert c[4 * 3, 1] == 3 and c[4 * 3, 2] == -3, "q8_0 ties away from zero"
    # the writer: a small checkpoint's twin parses back with every tensor
    # where its size says, aligned, and llama.cpp's gpt-oss keys present
    with tempfile.TemporaryDirectory() as tmp:
        ck, gg = os.path.join(tmp, "ck"), os.path.join(tmp, "t.gguf")
        gptoss_ckpt.write_checkpoint(ck, gptoss_ckpt.preset_params("default", format="mxfp4"))
        with open(os.path.join(ck, "config.json")) as fh:
            cfg = json.load(fh)
        made = all_tensors(Checkpoint(ck), cfg, Q8_0)
        write(gg, metadata(cfg, Q8_0), made)
        version, kv, tensors, data, size = read_gguf(gg)
        assert version == 3 and len(tensors) == len(made) == 3 + 19 * cfg["num_hidden_layers"]
        for key in ("block_count", "expert_count", "attention.sliding_window", "rope.scaling.factor"):
            assert f"gpt-oss.{key}" in kv, key
        assert len(kv["tokenizer.ggml.tokens"]) == cfg["vocab_size"]
        end = data
        for (name, ne, t, off), m in zip(tensors, made):
            assert (name, ne, t) == (m.name, m.ne, m.type) and off % ALIGN == 0 and data + off >= end, name
            end = data + off + m.nbytes
        assert end <= size, "data past the end"
        emb = Checkpoint(ck).get("model.embed_tokens.weight")
        with open(gg, "rb") as fh:
            fh.seek(data + tensors[0][3])
            first = np.frombuffer(fh.read(made[0].nbytes), np.uint8)
        assert np.array_equal(first, q8_0(emb).reshape(-1)), "token_embd bytes"
    print("gguf_twin self-test: mxfp4 repack, q8_0, the file layout: ok")


def main(argv):
    if argv == ["--selftest"]:
        return selftest()
    args = [a for a in argv if not a.startswith("--")]
    kinds = {"q8_0": Q8_0, "bf16": BF16, "f32": F32}
    dense_kind = Q8_0
    if "--dense" in argv:
        dense_kind = kinds[argv[argv.index("--dense") + 1]]
        args.remove(argv[argv.index("--dense") + 1])
    if len(args) != 2:
        raise SystemExit(__doc__.split("\n\n")[1])
    src, out = args
    with open(os.path.join(src, "config.json")) as fh:
        cfg = json.load(fh)
    if (cfg.get("quantization_config") or {}).get("quant_method") != "mxfp4":
        raise SystemExit("gguf_twin: config.json quantization_config.quant_method must be mxfp4")
    tensors = all_tensors(Checkpoint(src), cfg, dense_kind)
    write(out, metadata(cfg, dense_kind), tensors)
    print(f"gguf_twin: {out}: {len(tensors)} tensors, {os.path.getsize(out) / 1e9:.3f} GB")


if __name__ == "__main__":
    main(sys.argv[1:])
