#!/usr/bin/python3
"""Forced tool calls always come, over real HTTP: `moeserve serve` on a
random checkpoint with the default model's byte-level vocabulary (hidden
64, 2 layers, 8 experts top-2; tests/meson.build's forced-model), whose
reasoning often stops inside a character.

    /usr/bin/python3 tests/e2e/forced_calls.py --moeserve BIN --model DIR [--workdir DIR]

Checked, at temperature 1 and max_tokens 400:
  - 200 seeded chat requests whose tool_choice names one of three tools
    (seeds 1-67, each over the three), and 90 more with the bytes that
    start a multi-byte character pushed up (logit_bias) so that the
    reasoning nearly always stops inside a character: every one answers
    200 with finish_reason tool_calls, one call of that function, its
    arguments a JSON object valid for its parameters, and no header text in
    content;
  - tool_choice required (chat), a named function (/v1/responses) and
    Anthropic's any (/v1/messages) over more seeds: a call each time, of
    an allowed function;
  - a max_tokens too small for the call's frame is a 400 naming max_tokens
    at once (chat, Responses: max_output_tokens).
Uses tests/e2e/server.py's daemon and checks (the standard library only).
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server as S  # noqa: E402

TOOLS = [
    {"type": "function", "function": {"name": "move", "description": "Move a piece",
     "parameters": {"type": "object", "properties": {
         "from": {"type": "string"}, "to": {"type": "string"}}, "required": ["from", "to"]}}},
    {"type": "function", "function": {"name": "add", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"]}}},
    {"type": "function", "function": {"name": "lookup", "parameters": {
        "type": "object", "properties": {"word": {"type": "string"},
                                         "exact": {"type": "boolean"}}, "required": ["word"]}}},
]
TYPES = {"string": str, "integer": int, "boolean": bool}
USER = [{"role": "user", "content": "Make the next move."}]


def valid_args(name, args_text, where):
    params = next(t["function"]["parameters"] for t in TOOLS if t["function"]["name"] == name)
    try:
        args = json.loads(args_text) if isinstance(args_text, str) else args_text
    except ValueError:
        raise AssertionError(f"{where}: arguments are not JSON: {args_text[:200]!r}")
    S.check(isinstance(args, dict), f"{where}: arguments {args!r} are not an object")
    for k in params["required"]:
        S.check(k in args, f"{where}: {k!r} missing from {args}")
    for k, v in args.items():
        want = params["properties"].get(k)
        S.check(want is not None, f"{where}: {k!r} is not a parameter ({args})")
        ok = isinstance(v, TYPES[want["type"]]) and not (want["type"] == "integer" and isinstance(v, bool))
        S.check(ok, f"{where}: {k}={v!r} is not a {want['type']}")


# The byte tokens that start a multi-byte character (ids = bytes 0xC2-0xF4
# in this vocabulary) pushed up, and "analysis" (its first token, 285), so
# that the model reasons and its reasoning nearly always stops inside a
# character: the case that once lost the call's header.
LEAD_BYTES = {**{str(b): 10 for b in range(0xC2, 0xF5)}, "285": 6}


def chat_named(d, n, bias):
    bad = []
    for i in range(n):
        name = TOOLS[i % 3]["function"]["name"]
        seed = 1 + i // 3
        body = {"messages": USER, "tools": TOOLS, "temperature": 1, "seed": seed, "max_tokens": 400,
                "tool_choice": {"type": "function", "function": {"name": name}}}
        if bias:
            body["logit_bias"] = LEAD_BYTES
        st, _, j = d.post("/v1/chat/completions", body)
        where = f"seed {seed} tool {name}"
        S.check(st == 200, f"{where}: {st} {j}")
        ch = j["choices"][0]
        calls = ch["message"].get("tool_calls") or []
        if ch["finish_reason"] != "tool_calls" or len(calls) != 1:
            bad.append(f"{where}: finish {ch['finish_reason']}, content "
                       f"{str(ch['message'].get('content'))[:120]!r}")
            continue
        S.check(calls[0]["function"]["name"] == name, f"{where}: called {calls[0]['function']['name']}")
        S.check(not ch["message"].get("content"), f"{where}: content {ch['message']['content']!r}")
        valid_args(name, calls[0]["function"]["arguments"], where)
    S.check(not bad, f"{len(bad)} of {n} forced requests without their call:\n  " + "\n  ".join(bad[:8]))


def other_apis(d):
    names = [t["function"]["name"] for t in TOOLS]
    for seed in range(100, 130):
        st, _, j = d.post("/v1/chat/completions", {
            "messages": USER, "tools": TOOLS, "temperature": 1, "seed": seed, "max_tokens": 400,
            "tool_choice": "required"})
        calls = j["choices"][0]["message"].get("tool_calls") if st == 200 else None
        S.check(calls and calls[0]["function"]["name"] in names, f"required, seed {seed}: {st} {j}")
        valid_args(calls[0]["function"]["name"], calls[0]["function"]["arguments"], f"required {seed}")
    flat = [dict(type="function", **t["function"]) for t in TOOLS]
    for seed in range(130, 145):
        st, _, j = d.post("/v1/responses", {
            "input": "Add them.", "tools": flat, "temperature": 1, "max_output_tokens": 400,
            "tool_choice": {"type": "function", "name": "add"}, "store": False})
        S.check(st == 200, f"responses: {st} {j}")
        calls = [it for it in j["output"] if it["type"] == "function_call"]
        S.check(len(calls) == 1 and calls[0]["name"] == "add", f"responses: {j['output']}")
        valid_args("add", calls[0]["arguments"], "responses")
    anth = [{"name": t["function"]["name"], "input_schema": t["function"]["parameters"]} for t in TOOLS]
    for _ in range(15):
        st, _, j = d.post("/v1/messages", {
            "max_tokens": 400, "messages": USER, "tools": anth, "temperature": 1,
            "tool_choice": {"type": "any"}})
        S.check(st == 200, f"messages: {st} {j}")
        uses = [b for b in j["content"] if b["type"] == "tool_use"]
        S.check(len(uses) == 1 and j["stop_reason"] == "tool_use", f"messages: {j['content']}")
        valid_args(uses[0]["name"], uses[0]["input"], "messages")


def too_small(d):
    S.expect_error(d.post("/v1/chat/completions", {
        "messages": USER, "tools": TOOLS, "max_tokens": 3,
        "tool_choice": {"type": "function", "function": {"name": "move"}}}), 400, "max_tokens",
        ("max_tokens 3", "forced call"))
    S.expect_error(d.post("/v1/responses", {
        "input": "x", "tools": [dict(type="function", **TOOLS[0]["function"])],
        "max_output_tokens": 2, "tool_choice": "required"}), 400, "max_output_tokens")


def main():
    a = S.script_args(__doc__, "ms-forced.")
    t0 = time.monotonic()
    d = S.Daemon(a.moeserve, a.model, a.workdir, "forced", "--threads", "2")
    try:
        d.wait_ready(S.T(60))
        S.case("200 seeded named calls (chat)", chat_named, d, 200, False, daemon=d)
        S.case("90 more, their reasoning full of split characters", chat_named, d, 90, True,
               daemon=d)
        S.case("required, Responses and Messages forced calls", other_apis, d, daemon=d)
        S.case("max_tokens too small for the call: refused", too_small, d, daemon=d)
    finally:
        d.stop()
        if d.failed:
            d.print_log()
    return S.summary("forced-calls", t0)


if __name__ == "__main__":
    sys.exit(main())
