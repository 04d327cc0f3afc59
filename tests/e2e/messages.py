#!/usr/bin/python3
"""Anthropic's Messages API over real HTTP, what only the transport shows:
`moeserve serve` with the chat checkpoint, an API key, --max-running 1 and
--keepalive-s 1.

    /usr/bin/python3 tests/e2e/messages.py --moeserve BIN --model DIR [--workdir DIR]

--model is a chat-capable checkpoint (the random one: gibberish answers).
Checked:
  - the key as `x-api-key` or `Authorization: Bearer`; a wrong or missing one
    is a 401 in Anthropic's envelope {"type": "error", "error": {"type":
    "authentication_error", "message"}}; so are a 405 (with Allow), a 404
    under /v1/messages/, a 413 body and a refused field (400
    invalid_request_error naming it);
  - /v1/messages?beta=true and the anthropic-version / anthropic-beta
    headers are the same endpoint; any model name is served;
  - a stream that waits behind a running request (one runs at a time) gets
    message_start at once, then `ping` events while it waits, then its
    blocks, message_delta and message_stop;
  - a client that leaves a stream cancels its generation: the engine is
    idle long before the request's max_tokens could be reached, and the
    daemon still answers;
  - the access log counts a streamed request's tokens;
  - thinking.budget_tokens caps the thinking: over seeds, every thinking
    block re-tokenizes to at most the budget (a token or two of slack for
    the re-tokenizing), where a large budget lets the same model think on.
Uses tests/e2e/server.py's daemon and checks (the standard library only).
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server as S  # noqa: E402

KEY = "sk-e2e-messages"
AUTH = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}


def anthropic_error(resp, status, type_, needles=()):
    st, hd, j = resp
    S.check(st == status, f"status {st}, want {status}: {j}")
    S.check(isinstance(j, dict) and j.get("type") == "error" and isinstance(j.get("error"), dict),
            f"not Anthropic's envelope: {j}")
    e = j["error"]
    S.check(e.get("type") == type_ and isinstance(e.get("message"), str) and e["message"],
            f"error {e}, want type {type_}")
    for n in needles:
        S.check(n in e["message"], f"the message {e['message']!r} lacks {n!r}")
    return hd


def body(**kw):
    return {"model": "claude-sonnet-4-5", "max_tokens": 8, "temperature": 0,
            "messages": [{"role": "user", "content": "Hi"}], **kw}


def auth_and_errors(d):
    st, _, j = d.post("/v1/messages", body(), headers=AUTH)
    S.check(st == 200 and j["type"] == "message" and j["model"] == "gpt-oss-test", f"{st} {j}")
    st, _, j = d.post("/v1/messages?beta=true", body(), headers={
        "Authorization": f"Bearer {KEY}", "anthropic-beta": "interleaved-thinking-2025-05-14"})
    S.check(st == 200 and j["id"].startswith("msg_"), f"?beta=true with a Bearer key: {st} {j}")
    anthropic_error(d.post("/v1/messages", body(), headers={"x-api-key": "nope"}), 401,
                    "authentication_error", ["x-api-key"])
    anthropic_error(d.post("/v1/messages/count_tokens", body()), 401, "authentication_error")
    anthropic_error(d.post("/v1/messages/batches", body(), headers=AUTH), 404, "not_found_error")
    hd = anthropic_error(d.json("GET", "/v1/messages", headers=AUTH), 405, "invalid_request_error")
    S.check(hd.get("allow") == "POST", f"Allow {hd.get('allow')!r}")
    big = body(messages=[{"role": "user", "content": "x" * 70000}])
    anthropic_error(d.post("/v1/messages", big, headers=AUTH), 413, "request_too_large")
    anthropic_error(d.post("/v1/messages", body(max_tokens=None), headers=AUTH), 400,
                    "invalid_request_error", ["max_tokens"])
    st, _, j = d.post("/v1/messages/count_tokens", {"messages": [{"role": "user", "content": "Hi"}]},
                      headers=AUTH)
    S.check(st == 200 and isinstance(j.get("input_tokens"), int) and j["input_tokens"] > 0, f"{st} {j}")


def read_events(s):
    """(name, data) of each event, pings counted apart."""
    evs, pings = [], 0
    for name, j in s.typed_events():
        S.check(j.get("type") == name, f"event {name} with data of type {j.get('type')}")
        if name == "ping":
            pings += 1
        else:
            evs.append((name, j, pings))
    return evs, pings


def pings_while_queued(d, n_long):
    """One long request runs (--max-running 1); a stream behind it waits."""
    long_body = body(max_tokens=n_long, stream=True)
    first = S.SSE(d, "/v1/messages", long_body, headers=AUTH, timeout=S.T(120))
    S.check(first.status == 200, f"the long stream: {first.status}")
    d.wait_running(1, "the long stream")
    t = time.monotonic()
    s = S.SSE(d, "/v1/messages", body(stream=True, max_tokens=4), headers=AUTH, timeout=S.T(120))
    S.check(s.status == 200, f"the queued stream: {s.status}")
    evs, pings = read_events(s)
    names = [n for n, _, _ in evs]
    S.check(names and names[0] == "message_start" and evs[0][2] == 0,
            f"message_start did not come first, before any ping: {names[:3]}")
    S.check(names[-2:] == ["message_delta", "message_stop"], f"the stream ended with {names[-2:]}")
    S.check(pings >= 1, f"no ping in {time.monotonic() - t:.1f} s behind a running request")
    print(f"     {pings} ping(s) while queued, {len(evs)} events")
    s.close()
    read_events(first)
    first.close()


def disconnect_cancels(d, n_long):
    t = time.monotonic()
    s = S.SSE(d, "/v1/messages", body(max_tokens=n_long, stream=True), headers=AUTH, timeout=S.T(60))
    gen = s.typed_events()
    name, _ = next(gen)
    S.check(name == "message_start", f"first event {name}")
    for name, _ in gen:
        if name == "content_block_delta":
            break
    s.close()  # the client leaves mid-answer
    d.wait_idle(S.T(10))
    took = time.monotonic() - t
    S.check(took < S.T(10), f"the engine was busy {took:.1f} s after the client left")
    st, _, j = d.post("/v1/messages", body(), headers=AUTH)
    S.check(st == 200, f"after a client left: {st} {j}")


def logged_tokens(d):
    with open(d.log_path, "rb") as f:
        log = f.read().decode(errors="replace")
    lines = [ln for ln in log.splitlines() if " POST /v1/messages 200 " in ln]
    S.check(lines, "no access-log line of a Messages request")
    streamed = [ln for ln in lines if "prompt=0 " not in ln]
    S.check(len(streamed) == len(lines), f"lines without their prompt tokens: {lines}")


def thought_tokens(d, thinking, k):
    """The tokens of the thinking of one sampled answer (None: it did not
    think)."""
    msgs = [{"role": "user", "content": f"Hi {k}"}]
    st, _, j = d.post("/v1/messages", body(max_tokens=200, temperature=1, thinking=thinking,
                                           messages=msgs), headers=AUTH)
    S.check(st == 200, f"{st} {j}")
    text = "".join(b.get("thinking", "") for b in j["content"] if b["type"] == "thinking")
    if not text:
        return None
    st, _, t = d.post("/tokenize", {"prompt": text, "add_special_tokens": False}, headers=AUTH)
    S.check(st == 200, f"/tokenize: {st} {t}")
    return t["count"]


def thinking_budget(d):
    capped = [thought_tokens(d, {"type": "enabled", "budget_tokens": 6}, s) for s in range(8)]
    free = [thought_tokens(d, {"type": "enabled", "budget_tokens": 10000}, s) for s in range(8)]
    capped, free = [n for n in capped if n], [n for n in free if n]
    print(f"     thinking tokens with budget_tokens 6: {capped}; with 10000: {free}")
    S.check(capped, "no answer thought at all under the budget")
    S.check(max(capped) <= 6 + 2, f"a thinking of {max(capped)} tokens under budget_tokens 6")
    S.check(free and max(free) > 8, f"the thinking under budget_tokens 10000 no longer: {free}")


def main():
    a = S.script_args(__doc__, "ms-messages.")
    t0 = time.monotonic()
    d = S.Daemon(a.moeserve, a.model, a.workdir, "messages", "--served-model-name", "gpt-oss-test",
                 "--threads", "2", "--api-key", KEY, "--max-running", "1", "--keepalive-s", "1",
                 "--max-body-bytes", "64K", "--ctx-size", "16384")
    try:
        d.wait_ready(S.T(60))
        S.case("auth, errors and routes in Anthropic's dialect", auth_and_errors, d, daemon=d)
        # a request that runs some seconds on this build (sanitized ones are slower)
        t = time.monotonic()
        st, _, j = d.post("/v1/messages", body(max_tokens=64), headers=AUTH)
        S.check(st == 200, f"calibration: {st} {j}")
        rate = j["usage"]["output_tokens"] / max(time.monotonic() - t, 1e-3)
        n_long = int(min(16000, max(256, rate * 4)))
        print(f"     {rate:.0f} tokens/s: max_tokens {n_long} for ~4 s")
        S.case("pings while a stream waits its turn", pings_while_queued, d, n_long, daemon=d)
        S.case("a client that leaves cancels its stream", disconnect_cancels, d, n_long * 4, daemon=d)
        S.case("the access log counts a stream's tokens", logged_tokens, d, daemon=d)
        S.case("budget_tokens caps the thinking", thinking_budget, d, daemon=d)
    finally:
        d.stop()
        if d.failed:
            d.print_log()
    return S.summary("messages", t0)


if __name__ == "__main__":
    sys.exit(main())
