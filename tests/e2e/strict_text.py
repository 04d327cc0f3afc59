#!/usr/bin/python3
"""No silent truncation, and strict JSON, end to end (issue 23).

    /usr/bin/python3 tests/e2e/strict_text.py --moeserve BIN --model DIR --workdir DIR

--model: a checkpoint with its tokenizer.json (the embedded default model).
A NUL in a prompt, a chat message, a /tokenize body or the CLI's input is
the byte 0x00 token, never the end of the text: the token counts must equal
those of the same bytes given to the CLI (`tokenize` on stdin), and come
back out as \\u0000 (echo, /detokenize). Bodies that are not RFC 8259 JSON
(a raw NUL between tokens, trailing data, a duplicate key, invalid UTF-8)
are 400s naming the position or the key, and the daemon keeps serving.
Standard library only; one line per case, exit 1 on a failure.
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server as srv  # noqa: E402  (its Daemon: start, wait, HTTP)

RESULTS = []


def case(name, fn, *args):
    try:
        fn(*args)
        RESULTS.append((name, True))
        print(f"ok   {name}")
    except Exception as e:  # noqa: BLE001 -- every failure is reported
        RESULTS.append((name, False))
        print(f"FAIL {name}: {type(e).__name__}: {e}")


def cli_ids(binary, model, data):
    """The ids `moeserve tokenize` gives for these bytes on stdin."""
    out = subprocess.run([binary, "tokenize", "--model", model], input=data, capture_output=True,
                         check=True).stdout
    return [int(x) for x in out.split()]


def post(d, path, body):
    st, _, data = d.request("POST", path, body)
    return st, json.loads(data)


def raw(d, path, data):
    st, _, out = d.request("POST", path, data, headers={"Content-Type": "application/json"})
    return st, json.loads(out)


def nul_prompt(d, binary, model):
    want = cli_ids(binary, model, b"ab\0cd")
    assert len(want) > len(cli_ids(binary, model, b"ab")), want
    st, r = post(d, "/tokenize", {"prompt": "ab\u0000cd"})
    assert st == 200 and r["tokens"] == want, (st, r, want)
    st, r = post(d, "/v1/completions", {"prompt": "ab\u0000cd", "max_tokens": 1, "echo": True,
                                        "temperature": 0})
    assert st == 200, r
    assert r["usage"]["prompt_tokens"] == len(want), (r["usage"], want)
    assert r["choices"][0]["text"].startswith("ab\u0000cd"), r["choices"][0]["text"]
    st, r = post(d, "/detokenize", {"tokens": want})
    assert st == 200 and r["prompt"] == "ab\u0000cd", r


def nul_chat(d):
    def tokens(content):
        st, r = post(d, "/v1/chat/completions", {"messages": [{"role": "user", "content": content}],
                                                 "max_tokens": 1})
        assert st == 200, r
        return r["usage"]["prompt_tokens"]
    cut, whole = tokens("ab"), tokens("ab\u0000cd")
    assert whole > cut, (cut, whole)
    # a string list of parts keeps it too
    st, r = post(d, "/v1/chat/completions", {"max_tokens": 1, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "ab\u0000cd"}]}]})
    assert st == 200 and r["usage"]["prompt_tokens"] == whole, r


def not_json(d):
    cases = [
        (b'{"prompt": [1, 2]\x00, "max_tokens": 1}', "0x00"),
        (b'{"prompt": "a", "max_tokens": 1} x', "nothing may follow"),
        (b'{"prompt": "a", "max_tokens": 1, "max_tokens": 2}', 'key "max_tokens" appears twice'),
        (b'{"prompt": "a\xc0\x80"}', "not valid UTF-8"),
        (b'{"prompt": "a\x01"}', "control character"),
        (b'{"prompt": "a",\n "max_tokens": 01}', "line 2, column 17"),
    ]
    for body, want in cases:
        st, r = raw(d, "/v1/completions", body)
        assert st == 400, (body, st, r)
        msg = r["error"]["message"]
        assert want in msg and r["error"]["type"] == "invalid_request_error", (body, msg)
    st, r = post(d, "/v1/completions", {"prompt": "a", "max_tokens": 1})
    assert st == 200, r


def cli_prompt_file(binary, model, workdir):
    path = os.path.join(workdir, "nul-prompt.txt")
    with open(path, "wb") as f:
        f.write(b"ab\0cd")
    p = subprocess.run([binary, "generate", "--model", model, "--prompt-file", path, "--max-tokens", "1"],
                       capture_output=True, check=True)
    n = len(cli_ids(binary, model, b"ab\0cd"))
    assert f"prompt {n} tokens".encode() in p.stderr, p.stderr
    # decoded output keeps the byte; --jsonl writes it escaped
    ids = " ".join(map(str, cli_ids(binary, model, b"x\0y")))
    out = subprocess.run([binary, "tokenize", "--model", model, "--decode"], input=ids.encode(),
                         capture_output=True, check=True).stdout
    assert out == b"x\0y", out
    out = subprocess.run([binary, "tokenize", "--model", model, "--decode", "--jsonl"],
                         input=ids.encode() + b"\n", capture_output=True, check=True).stdout
    assert out.strip() == b'"x\\u0000y"', out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--moeserve", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    srv.SCALE = float(os.environ.get("MS_TEST_TIMEOUT_SCALE", "1"))
    d = srv.Daemon(a.moeserve, a.model, a.workdir, "strict-text")
    try:
        d.wait_ready()
        case("nul-prompt", nul_prompt, d, a.moeserve, a.model)
        case("nul-chat", nul_chat, d)
        case("not-json", not_json, d)
        case("cli-prompt-file", cli_prompt_file, a.moeserve, a.model, a.workdir)
    finally:
        d.stop()
    bad = sum(1 for _, ok in RESULTS if not ok)
    print(f"strict-text: {len(RESULTS) - bad} passed, {bad} failed")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
