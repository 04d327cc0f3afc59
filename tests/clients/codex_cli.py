#!/usr/bin/python3
"""OpenAI's Codex CLI (pinned in tests/clients/npm-codex) against `moeserve serve`.

    tools/npm-ci.sh tests/clients/npm-codex -- /usr/bin/python3 tests/clients/codex_cli.py \
        --moeserve BIN --model DIR [--codex tests/clients/npm-codex/node_modules/.bin/codex]

Starts BIN serve on a free loopback port with DIR (a chat-capable
checkpoint; tests use the random-weight one, so the answer is gibberish;
--max-tokens 48, as Codex sets no limit and such a model never stops),
writes a Codex configuration whose model provider is that daemon with
`wire_api = "responses"`, and runs `codex exec` on one prompt, twice: once
as it comes (streaming, store false, its instructions, its tools: function,
namespace and hosted ones, reasoning effort), once with a second turn
(`codex exec resume --last`, which sends the first turn's items back).

Each run must reach the end of the Responses stream as Codex reads it:
Codex prints the model's message and ends either normally or with the
"Incomplete response returned, reason: max_output_tokens" it reports for
`status: incomplete`; any stream, decoding or HTTP error Codex reports
fails the test. The daemon must have answered POST /v1/responses with 200 each time
and exit 0 on SIGTERM.

Exits 0 when every check passes, 1 otherwise, 77 when the Codex binary is
missing for this platform. The daemon's start and stop are daemon.py's,
shared with claude_code.py.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import daemon  # noqa: E402


def codex_run(codex, home, args, timeout):
    env = dict(os.environ, CODEX_HOME=home, NO_COLOR="1")
    env.pop("OPENAI_API_KEY", None)
    r = subprocess.run([codex, "exec", "--skip-git-repo-check", *args], capture_output=True,
                       text=True, timeout=timeout, env=env, cwd=home, stdin=subprocess.DEVNULL)
    return r.returncode, r.stdout + r.stderr


def check_run(name, rc, out, failures):
    # what Codex says when it could not read or use the stream
    bad = re.search(r"(stream (disconnected|error)|error decoding|unexpected status|"
                    r"failed to parse|invalid type|missing field|connection refused)", out, re.I)
    ended = "Incomplete response returned, reason: max_output_tokens" in out or rc == 0
    if bad or not ended:
        failures.append(name)
        tail = "\n".join(out.strip().splitlines()[-12:])
        print(f"FAIL {name}: exit {rc}{'; ' + bad.group(0) if bad else ''}\n{tail}")
    else:
        print(f"ok   {name} (exit {rc})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--moeserve", required=True)
    ap.add_argument("--model", required=True)
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--codex", default=os.path.join(here, "npm-codex", "node_modules", ".bin", "codex"))
    ap.add_argument("--timeout", type=float, default=300)
    a = ap.parse_args()
    if not os.access(a.codex, os.X_OK):
        print(f"codex-cli: {a.codex} is missing (tools/npm-ci.sh tests/clients/npm-codex installs it)")
        return 77
    port = daemon.free_port()
    home = tempfile.mkdtemp(prefix="ms-codex.")
    with open(os.path.join(home, "config.toml"), "w") as f:
        f.write('model = "gpt-oss-test"\nmodel_provider = "moeserve"\n'
                'model_reasoning_effort = "low"\n\n'
                '[model_providers.moeserve]\nname = "moeserve"\n'
                f'base_url = "http://127.0.0.1:{port}/v1"\nwire_api = "responses"\n')
    d, log = daemon.start(a.moeserve, port, a.model, "gpt-oss-test", os.path.join(home, "daemon.log"),
                          "--max-tokens", "48")
    failures = []
    try:
        if not daemon.wait_ready(port, d, log, a.timeout):
            return 1
        rc, out = codex_run(a.codex, home, ["Say hello."], a.timeout)
        check_run("codex exec: one turn, streamed", rc, out, failures)
        rc, out = codex_run(a.codex, home, ["resume", "--last", "And now say goodbye."], a.timeout)
        check_run("codex exec resume: the first turn's items sent back", rc, out, failures)
    finally:
        code, text = daemon.stop(d, log)
    posts = re.findall(r"POST /v1/responses (\d+)", text)
    if len(posts) < 2 or any(p != "200" for p in posts):
        failures.append("daemon statuses")
        print(f"FAIL POST /v1/responses statuses {posts}:\n{text[-2000:]}")
    else:
        print(f"ok   the daemon answered {len(posts)} POST /v1/responses with 200")
    if code != 0:
        failures.append("sigterm")
        print(f"FAIL the daemon exited {code} on SIGTERM")
    shutil.rmtree(home, ignore_errors=True)
    print(f"codex-cli: {2 + 2 - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
