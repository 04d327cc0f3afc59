#!/usr/bin/python3
"""Anthropic's Claude Code CLI (pinned in tests/clients/npm-claude) against `moeserve serve`.

    tools/npm-ci.sh tests/clients/npm-claude -- /usr/bin/python3 tests/clients/claude_code.py \
        --moeserve BIN --model DIR [--claude tests/clients/npm-claude/node_modules/.bin/claude]

Starts BIN serve on a free loopback port with DIR (a chat-capable
checkpoint; tests use the random-weight one, so the answer is gibberish),
an --api-key, --max-tokens 48 (the ceiling of the max_tokens 32000 that
Claude Code sends: such a model never stops) and --ctx-size 65536 (Claude
Code's system prompt and tools are some 10k tokens), then runs Claude Code
headless (`claude -p --output-format json`) in a fresh HOME and working
folder, twice: one prompt as it comes (the Messages API on
/v1/messages?beta=true, streamed, with its system blocks and a system
message, its tools, adaptive thinking with display "omitted",
output_config.effort, metadata, context_management, the x-api-key header),
then a second turn (`claude -p --continue`, which sends the first turn's
messages back).

Each run must end normally: exit 0 and a result that is not an error
(is_error false, no "API Error"); Claude Code reports any status, stream
or decoding error it met as such a result. One error result is the
expected end on the random model, and passes: it never ends a turn, so
every answer stops at the daemon's ceiling with stop_reason max_tokens,
which Claude Code takes for its own output limit: it asks the model to
resume (three times, raising max_tokens), then gives up with "API Error:
Claude's response exceeded the N output token maximum" (api_error
"max_output_tokens", no HTTP status) and exit 1. A model that ends its
turn ends the run normally. The daemon must have answered every POST
/v1/messages with 200; the second run's first request must hold more
prompt tokens than the first run's (the first turn came back) in the same
session; the daemon must exit 0 on SIGTERM.

Exits 0 when every check passes, 1 otherwise, 77 when the Claude Code
binary is missing for this platform. The daemon's start and stop are
daemon.py's, shared with codex_cli.py.
"""

import argparse
import glob
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import daemon  # noqa: E402

MODEL = "gpt-oss-test"


def claude_env(home, port, key):
    # Nothing of a user's own Claude Code or Anthropic setup may reach the
    # run (a key, a base URL, a model, CLAUDECODE of an enclosing session,
    # which makes the CLI refuse to start): only what points it at our daemon,
    # and no update checks, telemetry or error reports.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ANTHROPIC_", "CLAUDE_", "CLAUDECODE", "XDG_"))}
    env.update(HOME=home, ANTHROPIC_BASE_URL=f"http://127.0.0.1:{port}", ANTHROPIC_API_KEY=key,
               DISABLE_AUTOUPDATER="1", CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
               DISABLE_TELEMETRY="1", DISABLE_ERROR_REPORTING="1", NO_COLOR="1")
    return env


def claude_run(claude, env, cwd, args, timeout):
    """rc, the JSON result (or None), stdout + stderr."""
    try:
        r = subprocess.run([claude, "-p", *args, "--model", MODEL, "--output-format", "json"],
                           capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd,
                           stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        return "timeout", None, out
    result = None
    for line in r.stdout.splitlines():
        try:
            j = json.loads(line)
        except ValueError:
            continue
        if isinstance(j, dict) and j.get("type") == "result":
            result = j
    return r.returncode, result, r.stdout + r.stderr


# Claude Code's report of answers that all stopped at max_tokens (see above)
OUTPUT_LIMIT = re.compile(r"^API Error: Claude's response exceeded the \d+ output token maximum")


def check_run(name, rc, result, out, failures):
    why, limit = [], False
    if result is None:
        why.append(f"exit {rc}, no JSON result")
    elif (rc == 1 and result.get("is_error") is True and result.get("api_error") == "max_output_tokens"
          and result.get("api_error_status") is None and OUTPUT_LIMIT.match(str(result.get("result")))):
        limit = True
    else:
        if rc != 0:
            why.append(f"exit {rc}")
        if result.get("is_error") is not False:
            why.append(f"is_error {result.get('is_error')!r}")
        if result.get("subtype") != "success":
            why.append(f"subtype {result.get('subtype')!r}")
        if "API Error" in str(result.get("result", "")):
            why.append(repr(str(result.get("result"))[:300]))
        for k in ("api_error", "api_error_status", "api_error_type"):
            if result.get(k) is not None:
                why.append(f"{k} {result[k]!r}")
    if why:
        failures.append(name)
        tail = "\n".join(out.strip().splitlines()[-12:])
        print(f"FAIL {name}: {'; '.join(why)}\n{tail}")
    else:
        u = result.get("usage", {})
        how = "at the output limit, as the random model does" if limit else "normally"
        print(f"ok   {name}: ended {how} (exit {rc}, stop_reason {result.get('stop_reason')}, "
              f"{result.get('num_turns')} turn(s), {u.get('output_tokens')} output tokens)")


# the access log's line of a Messages request: "POST /v1/messages 200
# prompt=N completion=M 12.3ms" (the query is not the path)
POST = re.compile(r"POST /v1/messages(/count_tokens)? (\d+) prompt=(\d+)")


def posts(text):
    """[(path, status, prompt tokens)] of a stretch of the log."""
    return [("/v1/messages" + (m.group(1) or ""), m.group(2), int(m.group(3)))
            for m in POST.finditer(text)]


def native_missing(claude):
    # the npm package installs its binary from one optional dependency per
    # platform (claude-code-linux-x64, ...): none there, none for this one
    mods = os.path.join(os.path.dirname(os.path.realpath(claude)), "..", "..")
    return not glob.glob(os.path.join(mods, "claude-code-*", "claude*"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--moeserve", required=True)
    ap.add_argument("--model", required=True)
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--claude", default=os.path.join(here, "npm-claude", "node_modules", ".bin", "claude"))
    ap.add_argument("--timeout", type=float, default=300)
    a = ap.parse_args()
    if not os.access(a.claude, os.X_OK):
        print(f"claude-code: {a.claude} is missing (tools/npm-ci.sh tests/clients/npm-claude installs it)")
        return 77
    try:
        v = subprocess.run([a.claude, "--version"], capture_output=True, text=True, timeout=60,
                           stdin=subprocess.DEVNULL)
        version = v.stdout.strip() if v.returncode == 0 else None
        vout = v.stdout + v.stderr
    except OSError as e:
        version, vout = None, str(e)
    if not version:
        if native_missing(a.claude):
            print(f"claude-code: no Claude Code binary for this platform: {vout.strip()[-400:]}")
            return 77
        print(f"FAIL claude --version: {vout.strip()[-800:]}")
        return 1
    print(f"claude-code: {version}")
    port, key = daemon.free_port(), "sk-test-" + secrets.token_hex(8)
    tmp = tempfile.mkdtemp(prefix="ms-claude.")
    home, work = os.path.join(tmp, "home"), os.path.join(tmp, "work")
    os.mkdir(home)
    os.mkdir(work)
    env = claude_env(home, port, key)
    d, log = daemon.start(a.moeserve, port, a.model, MODEL, os.path.join(tmp, "daemon.log"),
                          "--max-tokens", "48", "--ctx-size", "65536", "--api-key", key)
    failures, results, marks = [], [], []
    try:
        if not daemon.wait_ready(port, d, log, a.timeout):
            return 1
        for name, args in (("claude -p: one turn", ["Say hello."]),
                           ("claude -p --continue: the first turn sent back", ["--continue", "And now say goodbye."])):
            log.flush()
            marks.append(os.path.getsize(log.name))
            rc, result, out = claude_run(a.claude, env, work, args, a.timeout)
            check_run(name, rc, result, out, failures)
            results.append(result or {})
    finally:
        code, text = daemon.stop(d, log)
    runs = [posts(text[marks[i]:marks[i + 1] if i + 1 < len(marks) else len(text)]) for i in range(len(marks))]
    every = [p for r in runs for p in r]
    if len(runs) < 2 or any(not r for r in runs) or any(st != "200" for _, st, _ in every):
        failures.append("daemon statuses")
        print(f"FAIL POST /v1/messages statuses per run {[[st for _, st, _ in r] for r in runs]}:\n{text[-2000:]}")
    else:
        print(f"ok   the daemon answered {len(every)} POST /v1/messages with 200 "
              f"({' and '.join(str(len(r)) for r in runs)} per run)")
    s1, s2 = [r.get("session_id") for r in (results + [{}, {}])[:2]]
    # each run's first answer's prompt (the access log counts streamed ones too)
    firsts = [next((n for path, _, n in r if path == "/v1/messages"), 0) for r in runs]
    p1, p2 = (firsts + [0, 0])[:2]
    if p1 > 0 and p2 > p1 and s1 and s1 == s2:
        print(f"ok   the second run continued the first's session ({p1} then {p2} prompt tokens)")
    else:
        failures.append("continued")
        print(f"FAIL the second run continued the first's: first prompts {p1} then {p2} tokens "
              f"(0: no answer logged), session {s1} then {s2}")
    if code != 0:
        failures.append("sigterm")
        print(f"FAIL the daemon exited {code} on SIGTERM")
    else:
        print("ok   the daemon exits 0 on SIGTERM")
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"claude-code: {5 - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
