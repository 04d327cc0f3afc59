#!/usr/bin/python3
"""Write the seed corpora of tests/fuzz (corpus/<target>/): small real inputs
of every parser: request bodies like the tests send, the default model's
configs and tokenizer (trimmed), every quantization config form that
tools/gptoss_ckpt.py's presets write, small safetensors files, schemas,
regexes and grammars from tests/grammar/structured_schemas.json. The output is
committed; rerun after changing this script:

    /usr/bin/python3 tests/fuzz/make_seeds.py
"""
import hashlib
import json
import os
import shutil
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SEP = b"\n@@\n"   # fuzz.h's FUZZ_SEP
sys.path.insert(0, os.path.join(ROOT, "tools"))


def write(target, items):
    d = os.path.join(HERE, "corpus", target)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for it in items:
        b = it if isinstance(it, bytes) else (it if isinstance(it, str) else json.dumps(it)).encode()
        open(os.path.join(d, hashlib.sha1(b).hexdigest()[:16]), "wb").write(b)


USER = [{"role": "user", "content": "Who is the king of Israel?"}]
TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "the city"},
        "unit": {"type": "string", "enum": ["c", "f"], "default": "c"},
        "days": {"type": "integer", "minimum": 1, "maximum": 7}},
        "required": ["city"]}}}
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
          "age": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}}},
          "required": ["name", "age"], "additionalProperties": False}


def completions():
    return [
        {"prompt": "And the LORD said unto Moses", "max_tokens": 40, "temperature": 0},
        {"model": "bf16", "prompt": ["In the beginning", "And God said"], "max_tokens": 8, "n": 2,
         "top_p": 0.9, "top_k": 40, "min_p": 0.05, "seed": 7, "stop": ["\n", "LORD"]},
        {"prompt": [1, 2, 3, 4], "max_tokens": 1, "logprobs": 5, "echo": True},
        {"prompt": [[10, 20], [30]], "max_tokens": 0, "echo": True, "logprobs": 0},
        {"prompt": "x", "stream": True, "stream_options": {"include_usage": True},
         "presence_penalty": 0.5, "frequency_penalty": 0.5, "repetition_penalty": 1.1,
         "logit_bias": {"17": -100, "4000": 5}},
        {"prompt": "Give JSON", "max_tokens": 30, "response_format": {"type": "json_object"}},
        {"prompt": "a", "guided_regex": "[a-z]{1,5}", "max_tokens": 5},
        {"prompt": "a", "guided_choice": ["yes", "no"]},
        {"prompt": "a", "guided_grammar": "root ::= \"yes\" | \"no\""},
        {"prompt": "ab\u0000cd", "max_tokens": 1},
        b'{"prompt": [1, 2]\x00, "max_tokens": 1}',
        {"prompt": "", "max_tokens": 1, "temperature": 2, "ignore_eos": True},
        # found by fuzzing (each a regression seed): a regex whose DFA's
        # first state is the empty set (engine/grammar/grammar.c, intern)
        b'{"prompt": "a", "guided_regex": "[]a-z]bf15}", "max_tokens": 5}',
    ]


def chat():
    return [
        {"messages": USER, "max_tokens": 60, "temperature": 0},
        {"model": "bf16", "messages": [{"role": "system", "content": "Be brief."},
                                       {"role": "developer", "content": "Speak KJV."}] + USER,
         "reasoning_effort": "high", "max_completion_tokens": 20, "logprobs": True, "top_logprobs": 3},
        {"messages": USER + [{"role": "assistant", "content": None, "reasoning_content": "think",
                              "tool_calls": [{"id": "c1", "type": "function", "function": {
                                  "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
                             {"role": "tool", "tool_call_id": "c1", "content": "{\"t\": 20}"}],
         "tools": [TOOL], "tool_choice": "auto"},
        {"messages": USER, "tools": [TOOL], "tool_choice": {"type": "function",
                                                            "function": {"name": "get_weather"}}},
        {"messages": USER, "tools": [dict(TOOL, function=dict(TOOL["function"], strict=True))],
         "tool_choice": "required", "stream": True, "stream_options": {"include_usage": True}},
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"},
                                                   {"type": "text", "text": " there"}]}]},
        {"messages": USER, "response_format": {"type": "json_schema", "json_schema": {
            "name": "person", "description": "a person", "schema": SCHEMA, "strict": True}}},
        {"messages": USER, "response_format": {"type": "json_object"}, "stop": ["Amen"]},
        {"messages": USER, "guided_json": SCHEMA, "n": 2},
        {"messages": [{"role": "user", "content": "<|end|><|start|>x\u0000"}]},
        {"messages": [{"role": "user"}], "tools": [{"type": "banana"}]},
    ]


def responses():
    prev = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hail"}]},
            {"type": "function_call", "call_id": "c1", "name": "get_weather",
             "arguments": "{\"city\":\"Rome\"}"},
            {"type": "function_call_output", "call_id": "c1", "output": "sunny"}]
    flat = {"type": "function", "name": "get_weather", "parameters": TOOL["function"]["parameters"]}
    bodies = [
        {"input": "Who is the king of Israel?"},
        {"model": "bf16", "instructions": "Be brief.", "input": prev, "tools": [flat],
         "tool_choice": "auto", "reasoning": {"effort": "low"}, "max_output_tokens": 30,
         "temperature": 0.7, "top_p": 0.9, "stream": True, "store": False},
        {"input": [{"role": "user", "content": "Hi"}], "text": {"format": {
            "type": "json_schema", "name": "person", "schema": SCHEMA, "strict": True}}},
        {"input": "x", "previous_response_id": "resp_1", "tools": [{"type": "web_search"}, TOOL]},
        {"input": [{"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text",
                                                                     "text": "hmm"}]}] + prev},
    ]
    out = [json.dumps(b).encode() for b in bodies]
    out.append(json.dumps(bodies[3]).encode() + SEP + json.dumps(prev).encode())
    return out


def messages():
    tool = {"name": "get_weather", "description": "The weather in a city",
            "input_schema": TOOL["function"]["parameters"], "cache_control": {"type": "ephemeral"}}
    turn = [{"role": "user", "content": "Weather in Rome?"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "", "signature": "moeserve-thinking-1.aG1t"},
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Rome"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "sunny"}],
                 "is_error": False},
                {"type": "text", "text": "Thanks"}]}]
    return [
        {"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": [{"role": "user", "content": "Hi"}]},
        {"max_tokens": 32000, "system": [{"type": "text", "text": "x-anthropic-billing-header: v;"},
                                         {"type": "text", "text": "Be brief."}],
         "messages": turn, "tools": [tool, {"type": "web_search_20250305", "name": "web_search"}],
         "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},
         "thinking": {"type": "adaptive", "display": "omitted"}, "output_config": {"effort": "high"},
         "context_management": {"edits": []}, "metadata": {"user_id": "u"}, "stream": True},
        {"max_tokens": 30, "messages": [{"role": "user", "content": "Hi"},
                                        {"role": "system", "content": [{"type": "text", "text": "env"}]}],
         "tools": [tool], "tool_choice": {"type": "tool", "name": "get_weather"},
         "thinking": {"type": "enabled", "budget_tokens": 2048}, "stop_sequences": ["END"],
         "temperature": 0.5, "top_p": 0.9, "top_k": 40},
        {"max_tokens": 30, "messages": [{"role": "user", "content": "Hi"}],
         "output_config": {"format": {"type": "json_schema", "schema": SCHEMA}}},
    ]


def tokenize():
    return [{"prompt": "And the LORD said", "add_special_tokens": True}, {"text": "<|start|>hi"},
            {"tokens": [1, 2, 3, 4080, 4095]}, {"prompt": "x", "tokens": [0]},
            {"prompt": "ab\u0000cd\u00e9"}, {"tokens": []}]


def safetensors():
    def st(tensors, meta=None, pad=0):
        hdr, data = {}, b""
        for name, (dt, shape, raw) in tensors.items():
            hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
            data += raw
        if meta:
            hdr["__metadata__"] = meta
        h = json.dumps(hdr).encode() + b" " * pad
        return struct.pack("<Q", len(h)) + h + data
    f32 = struct.pack("<4f", 1.0, -2.0, 0.5, 3.0)
    one = st({"model.norm.weight": ("F32", [4], f32),
              "model.layers.0.mlp.router.bias": ("BF16", [2], b"\x80\x3f\x00\x40"),
              "x.f16": ("F16", [2, 1], b"\x00\x3c\x00\xc0"), "empty": ("F32", [0], b""),
              "blocks": ("U8", [2, 2], b"\x01\x02\x03\x04"), "fp8": ("F8_E4M3", [2], b"\x38\x40"),
              "q": ("I32", [1], b"\x01\x00\x00\x00")}, {"format": "pt"}, pad=5)
    a = st({"a.weight": ("F32", [2], f32[:8])})
    b = st({"b.weight": ("BF16", [2, 2], b"\x80\x3f" * 4)})
    index = json.dumps({"metadata": {"total_size": 16},
                        "weight_map": {"a.weight": "a.safetensors", "b.weight": "b.safetensors"}}).encode()
    # the default model's real tensors that are small (norms, biases,
    # sinks, MXFP4 scales of the router...), with their bytes
    small = {}
    with open(os.path.join(ROOT, "models", "default", "mxfp4", "model.safetensors"), "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        for name in sorted(k for k in hdr if k != "__metadata__"):
            e = hdr[name]
            lo, hi = e["data_offsets"]
            if hi - lo <= 512 and len(small) < 12:
                f.seek(8 + n + lo)
                small[name] = (e["dtype"], e["shape"], f.read(hi - lo))
    return [one, a, index + SEP + a + SEP + b, st(small), st({})]


def model_config():
    import gptoss_ckpt as g
    out = []
    for sub in sorted(os.listdir(os.path.join(ROOT, "models", "default"))):
        p = os.path.join(ROOT, "models", "default", sub, "config.json")
        if os.path.exists(p):
            out.append(open(p, "rb").read())
    for name in list(g.PRESETS) + list(g.QUANT_PRESETS):
        p = g.preset_params(name)
        cfg = g.make_config(p)
        qc = g.quant_config_json(p)
        text = json.dumps(cfg, separators=(",", ":")).encode()
        if qc is not None and qc[0] != "config.json":
            text += SEP + json.dumps(qc[1]).encode()
        out.append(text)
    base = json.loads(out[0])
    gptq = {"quant_method": "gptq", "bits": 4, "group_size": 32, "sym": True, "desc_act": False,
            "dynamic": {"-:.*router.*": {}, "+:.*experts.*": {"bits": 8, "group_size": 64}}}
    quark_w4a8 = {"dtype": "fp4", "qscheme": "per_group", "group_size": 32, "is_dynamic": False,
                  "scale_format": "e8m0"}
    quark = {"quant_method": "quark", "global_quant_config": {
        "weight": quark_w4a8, "input_tensors": {"dtype": "fp8_e4m3", "qscheme": "per_tensor",
                                                "is_dynamic": True}},
        "layer_type_quant_config": {"FusedMoE": {"weight": quark_w4a8, "input_tensors": None}},
        "layer_quant_config": {"*self_attn*": {"weight": {"dtype": "fp8_e4m3", "qscheme": "per_channel",
                                                          "is_dynamic": False}}},
        "exclude": ["lm_head", "re:.*router.*", "model.layers.1.self_attn"]}
    for q in (gptq, quark, {"quant_method": "awq", "version": "gemv"}, {"quant_method": "bitsandbytes"}):
        out.append(json.dumps(dict(base, quantization_config=q)).encode())
    out.append(json.dumps(dict(base, rope_scaling=None, rope_parameters={
        "rope_type": "default", "rope_theta": 10000.0}, eos_token_id=3)).encode())
    # sizes past any model, which must be refused before anything is sized from them
    big = {k: v for k, v in base.items() if k != "layer_types"}
    out.append(json.dumps(dict(big, num_hidden_layers=444444444444444)).encode())
    out.append(json.dumps(dict(base, vocab_size=2**40, num_local_experts=2**31)).encode())
    return out


def tokenizer_load():
    t = json.load(open(os.path.join(ROOT, "models", "default", "bf16", "tokenizer.json")))
    m = t["model"]
    keep = {k: v for k, v in m["vocab"].items() if v < 300}
    merges = []
    for mg in m["merges"]:
        a, b = mg if isinstance(mg, list) else mg.split(" ", 1)
        if a + b in keep and a in keep and b in keep:
            merges.append(mg)
    small = dict(t, model=dict(m, vocab=keep, merges=merges[:40]),
                 added_tokens=[dict(a, id=300 + i) for i, a in enumerate(t["added_tokens"][:6])])
    out = [json.dumps(small)]
    strip = dict(small, added_tokens=small["added_tokens"] + [
        {"id": 310, "content": "<x>", "special": False, "lstrip": True, "rstrip": True,
         "single_word": False, "normalized": False}], pre_tokenizer={"type": "ByteLevel",
         "add_prefix_space": False, "trim_offsets": True, "use_regex": True})
    out.append(json.dumps(strip))
    out.append(json.dumps(dict(small, pre_tokenizer=None, decoder=None)))
    return out


def tokenizer_encode():
    return [b"\x00And the LORD said unto Moses, Go up.", b"\x01<|start|>user<|message|>Hi<|end|>",
            b"\x00  \t\n\n123456 x's \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", b"\x00ab\xc0\x80cd",
            b"\x01<|return|><|call|><|reserved_4095|>", b"\x00\xff\xfe", b"\x00a\x00b"]


def harmony_render():
    return [json.dumps(b) for b in chat()[:9]] + [json.dumps({
        "messages": [{"role": "assistant", "content": "c", "thinking": "r"}, {"role": "tool", "name": "f",
                                                                              "content": None}],
        "tools": [{"type": "function", "function": {"name": "f"}}], "reasoning_effort": "low"})]


def harmony_parse():
    # the default model's harmony ids as the target reads them: a byte
    # 0xF0 + (id - 4080) for a special token, two bytes for others
    S = {"start": 0xF8, "end": 0xF9, "message": 0xFA, "channel": 0xF7, "constrain": 0xF5,
         "return": 0xF4, "call": 0xFE}
    def text(ids):
        return bytes(b for i in ids for b in (i >> 8, i & 0xFF))
    an, fin, com, fn = text([100, 200]), text([300, 301, 302]), text([50]), text([400, 401])
    return [
        b"\x00" + bytes([S["channel"]]) + an + bytes([S["message"]]) + text([7, 8, 9]) +
        bytes([S["end"], S["start"]]) + text([10]) + bytes([S["channel"]]) + fin +
        bytes([S["message"]]) + text([11, 12]) + bytes([S["return"]]),
        b"\x00" + bytes([S["channel"]]) + com + fn + bytes([S["constrain"]]) + text([13]) +
        bytes([S["message"]]) + text([14, 15]) + bytes([S["call"]]),
        b"\x03" + text([1, 2, 3]) + bytes([S["message"], S["message"], S["end"]]),
        b"\x00" + text(list(range(20, 60))),
    ]


def grammar():
    data = json.load(open(os.path.join(ROOT, "tests", "grammar", "structured_schemas.json")))
    out = []
    for s in data[:24]:
        good = s.get("valid")
        if isinstance(good, list):
            good = good[0] if good else None
        out.append(b"\x00" + json.dumps(s["schema"]).encode() + SEP +
                   (json.dumps(good).encode() if good is not None else b""))
    out += [b"\x01" + SEP + b'{"a": [1, 2.5e3, true, null, "x"]}',
            b"\x02[a-z]+@[a-z]+\\.(com|org)" + SEP + b"abc@def.org",
            b"\x02(\\d{3}-){2}\\d{4}|[^\\s]{2,}?x*" + SEP + b"555-123-4567",
            b"\x03root ::= greeting \" \" name\ngreeting ::= \"hello\" | \"hi\"\nname ::= [A-Z] [a-z]*"
            + SEP + b"hello World",
            b"\x03root ::= (item \",\")* item\nitem ::= [0-9]+ | \"x\"{2,3}" + SEP + b"12,xx,3",
            b'\x04["yes", "no", "maybe"]' + SEP + b"maybe"]
    return out


def serve_config():
    return [{"port": 9000, "host": "0.0.0.0", "max_queue": 512, "api_key": "k", "log_format": "json"},
            json.dumps({"model": "models/default/bf16", "threads": 2, "kernels": "auto",
                        "served_model_name": "kjv", "max_tokens": 100, "cors_origin": "*"}).encode()
            + SEP + b"--port\n8081\n--log-level=debug" + SEP + b"MOESERVE_MAX_QUEUE=4\nMOESERVE_PORT=1",
            b"{}", b"{\"port\": \"x\"}"]


def api_keys():
    return [b"sk-one\n  sk-two  \n# a comment\n\n\tsk-three\r\n" + SEP + b"sk-two",
            b"only-key" + SEP + b"only-kex", b"# none\n", b"bad key\n", b"k" * 600]


def main():
    write("req-completions", completions())
    write("req-chat", chat())
    write("req-responses", responses())
    write("req-messages", messages())
    write("req-tokenize", tokenize())
    write("safetensors-header", safetensors())
    write("model-config", model_config())
    write("tokenizer-load", tokenizer_load())
    write("tokenizer-encode", tokenizer_encode())
    write("harmony-render", harmony_render())
    write("harmony-parse", harmony_parse())
    write("grammar", grammar())
    write("serve-config", serve_config())
    write("api-keys", api_keys())


if __name__ == "__main__":
    main()
