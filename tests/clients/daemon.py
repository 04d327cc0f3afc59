"""The daemon of the CLI clients' tests (codex_cli.py, claude_code.py):
`moeserve serve` on a free loopback port, its output in a log file that
the test reads back, ready once /health answers 200, stopped with SIGTERM.
Only the standard library is used.
"""

import signal
import socket
import subprocess
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(moeserve, port, model, name, log_path, *extra):
    """BIN serve on PORT with MODEL served as NAME, EXTRA (the test's own
    options) after the common ones -> (the process, its log open w+ for
    reading back)."""
    log = open(log_path, "w+")
    proc = subprocess.Popen([moeserve, "serve", "--port", str(port), "--model", model,
                             "--served-model-name", name, "--threads", "2", *extra],
                            stdout=log, stderr=subprocess.STDOUT)
    return proc, log


def wait_ready(port, proc, log, timeout):
    """True once /health answers 200; False, with a FAIL line and the log's
    tail, when the daemon exits or TIMEOUT seconds pass first."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if proc.poll() is not None:
            break
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"GET /health HTTP/1.0\r\n\r\n")
                if b"200" in s.recv(64):
                    return True
        except OSError:
            pass
        time.sleep(0.1)
    log.seek(0)
    print(f"FAIL the daemon did not become ready:\n{log.read()[-2000:]}")
    return False


def stop(proc, log):
    """SIGTERM, SIGKILL when it has not exited 60 s later -> (its exit code,
    or "killed"; the whole log)."""
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = "killed"
    log.seek(0)
    return code, log.read()
