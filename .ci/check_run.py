#!/usr/bin/env python3
"""CI: the README's first command, as a new user runs it.

    python3 .ci/check_run.py [--timeout S]

Starts `scripts/run.sh --host 127.0.0.1 --port P` (P a free loopback port)
from the checkout, waits for /health to answer 200 (it installs and builds
first: minutes on a fresh machine), sends one completion and one chat
request and checks both answer, then stops it with SIGTERM and checks it
exits 0. Standard library only: it runs before anything is installed.
Exit 0 when all of that holds; 1 with a one-line reason when not.
"""
import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Broke(Exception):
    pass


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_status(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None


def post(url, body):
    req = urllib.request.Request(url, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return json.load(r)
    except urllib.error.HTTPError as e:
        raise Broke(f"{url} answered {e.code}: {e.read()[:300]!r}")
    except (OSError, ValueError) as e:
        raise Broke(f"{url}: {e}")


def wait_healthy(proc, base, timeout):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if proc.poll() is not None:
            raise Broke(f"it exited with status {proc.returncode} before /health answered")
        if get_status(base + "/health") == 200:
            return time.monotonic() - t0
        time.sleep(1)
    raise Broke(f"/health did not answer 200 within {timeout} s")


def check_answers(base):
    c = post(base + "/v1/completions",
             {"prompt": "And the LORD said unto Moses", "max_tokens": 16, "temperature": 0})
    text = c.get("choices", [{}])[0].get("text")
    if not isinstance(text, str) or not text.strip():
        raise Broke(f"/v1/completions gave no text: {json.dumps(c)[:300]}")
    if c.get("usage", {}).get("completion_tokens", 0) <= 0:
        raise Broke(f"/v1/completions counted no tokens: {json.dumps(c)[:300]}")
    m = post(base + "/v1/chat/completions",
             {"messages": [{"role": "user", "content": "Who is the king of Israel?"}],
              "max_tokens": 64, "temperature": 0})
    choice = m.get("choices", [{}])[0]
    msg = choice.get("message", {})
    said = (msg.get("content") or "") + (msg.get("reasoning_content") or "")
    if msg.get("role") != "assistant" or not said.strip() or \
            choice.get("finish_reason") not in ("stop", "length"):
        raise Broke(f"/v1/chat/completions gave no answer: {json.dumps(m)[:300]}")
    return text, said


def stop(proc):
    proc.send_signal(signal.SIGTERM)
    try:
        rc = proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise Broke("it did not exit within 60 s of SIGTERM")
    if rc != 0:
        raise Broke(f"it exited with status {rc} after SIGTERM, not 0")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--timeout", type=float, default=1800,
                    help="seconds to wait for /health (install + build + load)")
    args = ap.parse_args()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cmd = ["bash", os.path.join(ROOT, "scripts", "run.sh"), "--host", "127.0.0.1",
           "--port", str(port)]
    print(f"ci: starting {' '.join(cmd[1:])}", flush=True)
    proc = subprocess.Popen(cmd, cwd=ROOT, stdin=subprocess.DEVNULL)
    try:
        took = wait_healthy(proc, base, args.timeout)
        text, said = check_answers(base)
        stop(proc)
    except Broke as e:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        print(f"ci: the README's first command (./scripts/run.sh) broke: {e}", flush=True)
        return 1
    print(f"ci: ./scripts/run.sh: /health 200 after {took:.0f} s; completion {text[:60]!r}; "
          f"chat {said[:60]!r}; exited 0 on SIGTERM", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
