#!/usr/bin/python3
"""Structured outputs end to end: `moeserve serve` on the chat model (random
weights, o200k_harmony vocabulary) sampled at temperature 1, so that only
the constraint can make an answer valid.

    /usr/bin/python3 tests/e2e/structured.py --moeserve BIN --chat-model DIR --node NODE
                                         [--workdir DIR] [--timeout-scale X]

Cases (one line each, then `structured: N passed, M failed`):

  schemas     every schema of tests/grammar/structured_schemas.json as
              response_format json_schema on chat, several seeds: half go
              straight to the final channel (a logit bias on its token), half
              reason until the budget makes them answer (the closing path);
              every answer ends with finish "stop" and validates against its
              schema with ajv + ajv-formats (tests/clients/json_validate.mjs)
  completions json_object, guided_json, llama-server's json_schema on
              /v1/completions (the whole output), validated the same way
  text        guided_regex (checked with Python's re, on patterns whose
              meaning is the same in ECMAScript), guided_choice, GBNF grammar
  tools       tool_choice required / named and strict functions: the call's
              arguments validate against the function's parameters
  responses   /v1/responses text.format json_schema
  stream      a streamed answer is the non-streamed one (same seed)
  batch       an unconstrained greedy request gives the same tokens alone and
              beside constrained ones
  logprobs    a constrained request's logprobs are the model's distribution
  refusals    what cannot be enforced is a 400 naming the field, the keyword
              and its JSON path

Only the standard library (and node for the validator) is used; the daemon's
helpers come from tests/e2e/server.py.
"""
import argparse
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CLIENTS = os.path.join(REPO, "tests", "clients")      # json_validate.mjs, npm-ajv/
SCHEMAS = os.path.join(REPO, "tests", "grammar", "structured_schemas.json")
sys.path.insert(0, HERE)
import server as S  # noqa: E402  (Daemon, case, check, SSE readers)

check = S.check
NODE = None
FINAL = None   # the token id of "final" (the final channel's name)


def validate(items):
    """items: [(schema or None, text)] -> [(ok, error)] by ajv, in order."""
    lines = [json.dumps({"schema": s, "text": t, "kind": "object" if s is None else "schema"})
             for s, t in items]
    p = subprocess.run(["bash", os.path.join(REPO, "tools", "npm-ci.sh"), os.path.join(CLIENTS, "npm-ajv"),
                        "--", NODE, os.path.join(CLIENTS, "json_validate.mjs")],
                       input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=S.T(300))
    check(p.returncode == 0, f"json_validate.mjs exited {p.returncode}: {p.stderr[-2000:]}")
    out = [json.loads(x) for x in p.stdout.splitlines() if x.strip()]
    check(len(out) == len(items), f"{len(out)} answers for {len(items)} texts")
    return [(o["ok"], o.get("error")) for o in out]


def all_valid(named):
    """named: [(label, schema, text)]: every text validates."""
    res = validate([(s, t) for _, s, t in named])
    bad = [f"{lab}: {err}: {t[:300]!r}" for (lab, _, t), (ok, err) in zip(named, res) if not ok]
    check(not bad, f"{len(bad)} of {len(named)} invalid:\n       " + "\n       ".join(bad[:8]))


def chat(d, body):
    st, _, j = d.post("/v1/chat/completions", body, timeout=S.T(300))
    check(st == 200, f"chat: {st} {j}")
    return j["choices"][0]


def completion(d, body):
    st, _, j = d.post("/v1/completions", {"prompt": "Answer:", **body}, timeout=S.T(300))
    check(st == 200, f"completions: {st} {j}")
    return j["choices"][0]


def pmap(fn, xs, workers=4):
    with concurrent.futures.ThreadPoolExecutor(workers) as ex:
        return list(ex.map(fn, xs))


USER = [{"role": "user", "content": "Fill in the form."}]


def schema_body(schema, seed, straight, max_tokens=400):
    b = {"messages": USER, "temperature": 1, "seed": seed, "max_tokens": max_tokens,
         "response_format": {"type": "json_schema",
                             "json_schema": {"name": "form", "schema": schema, "strict": True}}}
    if straight:
        b["logit_bias"] = {str(FINAL): 100}
    return b


def schemas_case(d, seeds):
    cases = json.load(open(SCHEMAS))
    jobs = [(c, seed) for c in cases for seed in range(seeds)]

    def one(job):
        c, seed = job
        # room for the shortest answer (closing writes a byte a token) and more
        room = 400 + 2 * len(json.dumps(c.get("valid")))
        ch = chat(d, schema_body(c["schema"], 1000 + seed, straight=seed % 2 == 0, max_tokens=room))
        check(ch["finish_reason"] == "stop", f"{c['name']} seed {seed}: finish {ch['finish_reason']} "
              f"({ch['message'].get('content')!r})")
        return (f"{c['name']} seed {seed}", c["schema"], ch["message"]["content"] or "")
    got = pmap(one, jobs)
    all_valid(got)
    names = {c["name"] for c in cases}
    check(len(names) >= 20, f"only {len(names)} schemas")
    # the answers are the model's, not one canned sentence per schema
    varied = sum(len({t for lab, _, t in got if lab.startswith(n + " ")}) > 1 for n in names)
    check(varied >= len(names) // 2, f"only {varied} schemas got more than one distinct answer")


def completions_case(d, seeds):
    sch = {"type": "object", "properties": {"id": {"type": "integer", "minimum": 0},
                                            "tags": {"type": "array", "items": {"type": "string", "maxLength": 8},
                                                     "maxItems": 3}},
           "required": ["id", "tags"], "additionalProperties": False}
    named = []
    for seed in range(seeds):
        for field, value, schema in (("response_format", {"type": "json_object"}, None),
                                     ("guided_json", sch, sch), ("json_schema", sch, sch),
                                     ("structured_outputs", {"json": sch}, sch)):
            c = completion(d, {field: value, "max_tokens": 120, "temperature": 1, "seed": seed})
            check(c["finish_reason"] == "stop", f"{field}: finish {c['finish_reason']} ({c['text']!r})")
            named.append((f"{field} seed {seed}", schema, c["text"]))
    all_valid(named)


def text_case(d, seeds):
    regexes = [r"(ab|cd)+[0-9]{2,3}", r"[A-Z][a-z]{1,6}( [A-Z][a-z]{1,6})?", r"\d{3}-\d{4}",
               r"(true|false|maybe)!?", r"[a-f0-9]{8}"]
    for seed in range(seeds):
        for rx in regexes:
            c = completion(d, {"guided_regex": rx, "max_tokens": 40, "temperature": 1, "seed": seed})
            check(re.fullmatch(rx, c["text"]), f"guided_regex {rx}: {c['text']!r}")
        choices = ["yes", "no", "a longer answer, with a comma"]
        c = completion(d, {"guided_choice": choices, "max_tokens": 40, "temperature": 1, "seed": seed})
        check(c["text"] in choices, f"guided_choice: {c['text']!r}")
        gbnf = 'root ::= "(" item ("," item)* ")"\nitem ::= [a-z]+ | num\nnum ::= [0-9]{1,3}\n'
        c = completion(d, {"grammar": gbnf, "max_tokens": 40, "temperature": 1, "seed": seed})
        check(re.fullmatch(r"\((?:[a-z]+|[0-9]{1,3})(?:,(?:[a-z]+|[0-9]{1,3}))*\)", c["text"]),
              f"grammar: {c['text']!r}")


TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "strict": True, "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "maxLength": 16},
                                         "unit": {"enum": ["c", "f"]}},
        "required": ["city", "unit"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "add", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"], "additionalProperties": False}}},
]


def tools_case(d, seeds):
    params = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    named = []
    for seed in range(seeds):
        for choice in ("required", {"type": "function", "function": {"name": "add"}}):
            ch = chat(d, {"messages": USER, "tools": TOOLS, "tool_choice": choice, "temperature": 1,
                          "seed": seed, "max_tokens": 200})
            check(ch["finish_reason"] == "tool_calls", f"{choice}: finish {ch['finish_reason']}")
            calls = ch["message"].get("tool_calls") or []
            check(len(calls) == 1, f"{choice}: calls {calls}")
            fn = calls[0]["function"]
            if isinstance(choice, dict):
                check(fn["name"] == "add", f"named add, called {fn['name']}")
            named.append((f"{fn['name']} seed {seed}", params[fn["name"]], fn["arguments"]))
    all_valid(named)


def responses_case(d, seeds):
    sch = {"type": "object", "properties": {"ok": {"type": "boolean"},
                                            "n": {"type": "integer", "minimum": 1, "maximum": 9}},
           "required": ["ok", "n"], "additionalProperties": False}
    named = []
    for seed in range(seeds):
        st, _, j = d.post("/v1/responses", {
            "input": "Answer.", "max_output_tokens": 120, "temperature": 1, "seed": seed,
            "logit_bias": {str(FINAL): 100} if seed % 2 == 0 else {},
            "text": {"format": {"type": "json_schema", "name": "a", "schema": sch, "strict": True}}},
            timeout=S.T(300))
        check(st == 200, f"responses: {st} {j}")
        check(j.get("status") == "completed", f"status {j.get('status')}")
        texts = [c["text"] for o in j["output"] if o["type"] == "message" for c in o["content"]]
        check(len(texts) == 1, f"output {j['output']}")
        named.append((f"responses seed {seed}", sch, texts[0]))
    all_valid(named)


def stream_case(d):
    sch = json.load(open(SCHEMAS))[0]["schema"]
    for seed in (7, 8):
        body = schema_body(sch, seed, straight=seed == 7, max_tokens=200)
        ch = chat(d, body)
        content, _, _, finish, _, _ = S.stream_chat(d, {**body, "stream": True}, d.served)
        check(content == ch["message"]["content"], f"stream {content!r} != {ch['message']['content']!r}")
        check(finish == ch["finish_reason"], f"finish {finish} != {ch['finish_reason']}")
    body = {"prompt": "Answer:", "guided_json": sch, "max_tokens": 100, "temperature": 1, "seed": 3}
    c = completion(d, body)
    text, _ = S.stream_completion(d, {**body, "stream": True}, d.served)[:2]
    check(text[0] == c["text"], f"completion stream {text[0]!r} != {c['text']!r}")


def batch_case(d):
    plain = {"prompt": "Once upon a time", "max_tokens": 48, "temperature": 0}
    alone = completion(d, plain)["text"]
    sch = {"type": "array", "items": {"type": "string"}, "maxItems": 12}
    busy = [{"guided_json": sch, "max_tokens": 120, "temperature": 1, "seed": s} for s in range(4)]
    res = pmap(lambda b: completion(d, b)["text"], busy + [plain] + busy, workers=9)
    check(res[4] == alone, f"greedy beside constrained requests: {res[4]!r} != {alone!r}")


def metrics_case(d):
    ms = d.metrics()
    comp = S.metric(ms, "moeserve:structured_grammar_compiles_total", model_name=d.served)
    hits = S.metric(ms, "moeserve:structured_grammar_cache_hits_total", model_name=d.served)
    secs = S.metric(ms, "moeserve:structured_grammar_compile_seconds_total", model_name=d.served)
    # each schema compiled once, its other seeds hits
    # how many of each depends on what the sampled answers asked for
    # (temperature 1): both many, neither bounded by the other
    check(comp >= 20 and hits >= 20, f"compiles {comp}, hits {hits}")
    check(0 < secs < comp, f"compile seconds {secs} for {comp} grammars")


def logprobs_case(d):
    c = completion(d, {"guided_choice": ["yes", "no"], "max_tokens": 4, "temperature": 1, "seed": 1,
                       "logprobs": 5})
    check(c["text"] in ("yes", "no"), f"choice {c['text']!r}")
    top = c["logprobs"]["top_logprobs"][0]
    check(len(top) == 5, f"top_logprobs {top}")
    # the model's distribution: alternatives the constraint refused are there
    check(any(not ("yes".startswith(k) or "no".startswith(k)) for k in top), f"top {top}")
    check(all(v <= 0 for v in top.values()), f"top {top}")


def refusals_case(d):
    def bad(path, body, param, needles):
        S.expect_error(d.post(path, body), 400, param, needles)
    rf = lambda s: {"type": "json_schema", "json_schema": {"name": "x", "schema": s}}  # noqa: E731
    p = "/v1/chat/completions"
    bad(p, {"messages": USER, "response_format": rf({"type": "object", "properties": {"a": {"not": {}}}})},
        "response_format.json_schema.schema", ['"not"', "/properties/a"])
    bad(p, {"messages": USER, "response_format": rf({"type": "string", "pattern": "(a)\\1"})},
        "response_format.json_schema.schema", ["pattern"])
    bad(p, {"messages": USER, "response_format": {"type": "yaml"}}, "response_format.type", ["json_schema"])
    bad(p, {"messages": USER, "response_format": {"type": "json_schema"}},
        "response_format.json_schema.schema", ["schema"])
    bad(p, {"messages": USER, "response_format": {"type": "json_object"}, "guided_regex": "a+"},
        "guided_regex", ["both"])
    bad(p, {"messages": USER, "tools": [{"type": "function", "function": {
        "name": "f", "strict": True, "parameters": {"type": "object", "if": {}}}}]},
        "tools[0].function.parameters", ['"if"'])
    c = "/v1/completions"
    bad(c, {"prompt": "x", "guided_regex": "(ab"}, "guided_regex", [])
    bad(c, {"prompt": "x", "guided_regex": 5}, "guided_regex", ["string"])
    bad(c, {"prompt": "x", "grammar": "root ::= undefined-rule"}, "grammar", ["undefined-rule"])
    bad(c, {"prompt": "x", "guided_choice": "yes"}, "guided_choice", ["list"])
    # and the daemon still answers
    completion(d, {"guided_choice": ["ok"], "max_tokens": 4})


def main():
    global NODE, FINAL
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--moeserve", required=True)
    ap.add_argument("--chat-model", required=True)
    ap.add_argument("--node", required=True)
    ap.add_argument("--workdir")
    ap.add_argument("--timeout-scale", type=float,
                    default=float(os.environ.get("MS_TEST_TIMEOUT_SCALE", "1") or 1))
    a = ap.parse_args()
    S.SCALE = a.timeout_scale
    NODE = a.node
    work = a.workdir or tempfile.mkdtemp(prefix="ms-structured-")
    os.makedirs(work, exist_ok=True)
    t0 = time.monotonic()
    d = S.Daemon(os.path.abspath(a.moeserve), a.chat_model, work, "structured")
    d.served = os.path.basename(os.path.normpath(a.chat_model))
    ok = S.case("ready", d.wait_ready, daemon=d)
    if ok:
        st, _, j = d.post("/tokenize", {"prompt": "final"})
        check(st == 200 and len(j["tokens"]) == 1, f"/tokenize final: {j}")
        FINAL = j["tokens"][0]
        # sanitizer builds are slower: fewer seeds, the same cases
        seeds = 2 if S.SCALE <= 1 else 1
        for name, fn, args in (("schemas", schemas_case, (seeds * 2,)),
                               ("completions", completions_case, (seeds,)),
                               ("text", text_case, (seeds * 2,)), ("tools", tools_case, (seeds * 2,)),
                               ("responses", responses_case, (seeds * 2,)), ("stream", stream_case, ()),
                               ("batch", batch_case, ()), ("metrics", metrics_case, ()),
                               ("logprobs", logprobs_case, ()),
                               ("refusals", refusals_case, ())):
            S.case(name, fn, d, *args, daemon=d)
    rc = d.stop()
    S.case("exit", check, rc == 0, f"exit status {rc}")
    sys.exit(S.summary("structured", t0))


if __name__ == "__main__":
    main()
