#!/usr/bin/python3
"""moeserve's harmony prompts against the official gpt-oss chat template,
rendered by a real Jinja engine (Debian's python3-jinja2), on random
multi-turn tool-calling conversations.

    /usr/bin/python3 tests/models/chat_template.py --moeserve BIN \
        --template CHAT_TEMPLATE.jinja [--cases N] [--seed S]

The template is a checkpoint's own (`chat_template.jinja`, or the
`chat_template` of its tokenizer_config.json): --template, or
$MOESERVE_CHAT_TEMPLATE. None is shipped in this repository (it is OpenAI's
text), so without one the test is skipped (exit 77), as it is without
jinja2.

The environment is the one transformers renders chat templates in:
trim_blocks, lstrip_blocks, loop controls, its `tojson` (ensure_ascii off),
`raise_exception` and `strftime_now`; add_generation_prompt is on. Each
case is a conversation of system / developer / user messages, assistant
turns with reasoning and a tool call or a final answer, tool results, and
a tool list with parameter schemas of every kind the renderer handles,
plus a reasoning effort. moeserve renders the same conversation with
`moeserve tokenize --chat --jsonl` (the daemon's message parser and
renderer) and the texts must be equal, byte for byte.

Where moeserve departs from the template on purpose (harmony.h lists it:
every tool call of a message rendered, a tool result headed by its own
name, an assistant message with both reasoning and content in a tool-call
turn), the cases stay on the template's side: one call per message, tool
results named after the last call, no such message.

Exits 0 when every case matches, 1 otherwise (the first differences
shown), 77 when it cannot run.
"""

import argparse
import datetime
import json
import os
import random
import subprocess
import sys


def jinja_env():
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    def strftime_now(fmt):
        return datetime.datetime.now(datetime.timezone.utc).strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


WORDS = "the weather city time paris rome list files check value result done ok".split()


def text(rng, lo=1, hi=8):
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


def schema(rng, depth=0):
    kinds = ["string", "number", "integer", "boolean", "enum", "array", "object", "nullable"]
    k = rng.choice(kinds if depth < 2 else kinds[:5])
    s = {}
    if k == "enum":
        s = {"type": "string", "enum": rng.sample(["a", "b", "c", "d"], rng.randint(1, 3))}
    elif k == "array":
        s = {"type": "array", "items": schema(rng, depth + 1)}
    elif k == "object":
        props = {f"p{i}": schema(rng, depth + 1) for i in range(rng.randint(1, 3))}
        s = {"type": "object", "properties": props}
        if rng.random() < 0.5:
            s["required"] = [next(iter(props))]
    elif k == "nullable":
        s = {"type": ["string", "null"]}
    else:
        s = {"type": k}
    if rng.random() < 0.4:
        s["description"] = text(rng, 2, 6)
    if k in ("string", "integer") and rng.random() < 0.2:
        s["default"] = "x" if k == "string" else 3
    return s


def tools(rng):
    out = []
    for i in range(rng.randint(1, 3)):
        fn = {"name": f"tool_{i}_{rng.choice(WORDS)}"}
        if rng.random() < 0.8:
            fn["description"] = text(rng, 3, 10)
        if rng.random() < 0.85:
            fn["parameters"] = {"type": "object", "properties": {
                f"a{j}": schema(rng) for j in range(rng.randint(1, 4))}}
        out.append({"type": "function", "function": fn})
    return out


def conversation(rng):
    """-> (moeserve's chat body, the template's messages and kwargs)."""
    tl = tools(rng) if rng.random() < 0.8 else []
    ours, theirs = [], []
    if rng.random() < 0.4:
        role = rng.choice(["system", "developer"])
        m = {"role": role, "content": text(rng, 3, 12)}
        ours.append(m)
        theirs.append(dict(m))
    for turn in range(rng.randint(1, 4)):
        u = {"role": "user", "content": text(rng)}
        ours.append(u)
        theirs.append(dict(u))
        # a tool-calling sequence, then (usually) a final answer
        for _ in range(rng.randint(0, 3) if tl else 0):
            fn = rng.choice(tl)["function"]
            args = {"a0": rng.choice(WORDS), "n": rng.randint(0, 9)}
            think = text(rng) if rng.random() < 0.8 else None
            om = {"role": "assistant", "content": None, "tool_calls": [
                {"id": f"call_{len(ours)}", "type": "function",
                 "function": {"name": fn["name"], "arguments": json.dumps(args)}}]}
            tm = {"role": "assistant", "tool_calls": [{"type": "function", "function": {
                "name": fn["name"], "arguments": args}}]}
            if think:
                om["reasoning_content"] = think
                tm["thinking"] = think
            ours.append(om)
            theirs.append(tm)
            out = json.dumps({"v": rng.choice(WORDS)}) if rng.random() < 0.7 else text(rng)
            ours.append({"role": "tool", "tool_call_id": f"call_{len(ours) - 1}", "content": out})
            theirs.append({"role": "tool", "name": fn["name"], "content": out})
        if turn < 3 and rng.random() < 0.85:
            think = text(rng) if rng.random() < 0.7 else None
            om = {"role": "assistant", "content": text(rng)}
            tm = dict(om)
            if think:
                om["reasoning_content"] = think
                tm["thinking"] = think
            ours.append(om)
            theirs.append(tm)
    if ours[-1]["role"] == "assistant" and not ours[-1].get("tool_calls"):
        u = {"role": "user", "content": text(rng)}
        ours.append(u)
        theirs.append(dict(u))
    effort = rng.choice([None, "low", "medium", "high"])
    body = {"messages": ours}
    kwargs = {}
    if tl:
        body["tools"] = tl
        kwargs["tools"] = tl
    if effort:
        body["reasoning_effort"] = effort
        kwargs["reasoning_effort"] = effort
    return body, theirs, kwargs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--moeserve", required=True)
    ap.add_argument("--template", default=os.environ.get("MOESERVE_CHAT_TEMPLATE"))
    ap.add_argument("--cases", type=int, default=400)
    ap.add_argument("--seed", type=int, default=20261202)
    a = ap.parse_args()
    if not a.template:
        print("chat-template: skipped: no template (--template or MOESERVE_CHAT_TEMPLATE: a "
              "gpt-oss checkpoint's chat_template.jinja)")
        return 77
    try:
        env = jinja_env()
    except ImportError:
        print("chat-template: skipped: python3-jinja2 is not installed")
        return 77
    src = open(a.template, encoding="utf-8").read()
    if a.template.endswith(".json"):  # tokenizer_config.json
        src = json.loads(src)["chat_template"]
    tpl = env.from_string(src)
    rng = random.Random(a.seed)
    cases = [conversation(rng) for _ in range(a.cases)]
    want = [tpl.render(messages=t, add_generation_prompt=True, **kw) for _, t, kw in cases]
    r = subprocess.run([a.moeserve, "tokenize", "--chat", "--jsonl"], capture_output=True,
                       text=True, input="".join(json.dumps(b) + "\n" for b, _, _ in cases))
    if r.returncode != 0:
        print(f"chat-template: moeserve tokenize --chat: exit {r.returncode}\n{r.stderr}")
        return 1
    got = [json.loads(line) for line in r.stdout.splitlines()]
    bad = [i for i in range(len(cases)) if i >= len(got) or got[i] != want[i]]
    for i in bad[:3]:
        g = got[i] if i < len(got) else ""
        at = next((k for k in range(min(len(g), len(want[i]))) if g[k] != want[i][k]),
                  min(len(g), len(want[i])))
        print(f"case {i}: differs at byte {at}\n  moeserve: {g[max(0, at - 80):at + 80]!r}\n"
              f"  template: {want[i][max(0, at - 80):at + 80]!r}\n  body: {json.dumps(cases[i][0])[:600]}")
    print(f"chat-template: {len(cases) - len(bad)} of {len(cases)} conversations render the "
          f"template's text")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
