#!/usr/bin/python3
"""The served checkpoint truncated under a running daemon (config/ms-mapguard.h),
over real HTTP:

    /usr/bin/python3 tests/e2e/mapfault_serve.py --moeserve BIN --model DIR [--workdir DIR]

--model: the random model (token-id prompts), copied, since the test
truncates it. The daemon runs the reference kernels, which read the bf16
weights in place from the mapping. After the truncation the next request
fails instead of killing the process with SIGBUS, with a 503 (or, streamed,
an error event) whose message is the failed step's own, naming the file;
/health turns 503 "failed" naming the file (with Retry-After); later
requests are 503s; the daemon still exits 0 on SIGTERM. Run twice: the
failing request plain, then streamed. Uses tests/e2e/server.py's daemon and checks.
"""
import http.client
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server as S  # noqa: E402


def lost_weights(j, weights):
    """The failed step's own reason, not a bare "out of memory"."""
    m = j["error"]["message"]
    S.check(weights in m and "shrank while mapped" in m, f"the failed step's error: {j}")


def streamed_error(d):
    """A stream whose step fails: status 200, then an error event, then the
    connection ends without [DONE]. -> the error event's JSON."""
    s = S.SSE(d, "/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 4, "stream": True})
    errors = []
    try:
        S.check(s.status == 200, f"stream status {s.status}")
        for ev in s.events():
            if "error" in ev:
                errors.append(ev)
        raise AssertionError("a stream on lost weights ended with [DONE]")
    except (AssertionError, http.client.HTTPException, OSError) as e:
        S.check(errors, f"no error event before the stream ended ({e})")
    finally:
        s.close()
    S.check(len(errors) == 1 and errors[0]["error"]["code"] == 503, f"error events {errors}")
    return errors[0]


def cases(d, weights, stream):
    def truncated():
        st, _, j = d.post("/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 4})
        S.check_completion(st, j, S.TOKEN_MODEL, 1, 4)
        os.truncate(weights, 0)
        if stream:
            lost_weights(streamed_error(d), weights)
        else:
            st, hd, j = d.post("/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 4})
            S.expect_error((st, hd, j), 503)
            lost_weights(j, weights)
        S.check(d.proc.poll() is None, f"the daemon died ({d.proc.returncode})")
        deadline = time.monotonic() + S.T(10)
        while True:
            st, hd, j = d.json("GET", "/health")
            if st == 503:
                break
            S.check(time.monotonic() < deadline, f"/health still {st} {j}")
            time.sleep(0.05)
        S.check(j.get("status") == "failed" and weights in j.get("reason", "")
                and "shrank while mapped" in j["reason"], f"/health {j}")
        S.check(hd.get("retry-after", "").isdigit(), f"/health without Retry-After: {hd}")
        st, hd, j = d.post("/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 4})
        S.expect_error((st, hd, j), 503)
        st, _, _ = d.json("GET", "/live")
        S.check(st == 200, f"/live {st}")

    S.case(f"mapfault: checkpoint truncated while serving{' (a stream)' if stream else ''}: "
           "request fails with the reason, /health failed, alive", truncated, daemon=d)


def main():
    a = S.script_args(__doc__, "ms-mapfault-")
    work = a.workdir
    S.TOKEN_MODEL = "model"
    model = os.path.join(work, "model")
    weights = os.path.join(model, "model.safetensors")
    for stream in (False, True):
        shutil.rmtree(model, ignore_errors=True)
        shutil.copytree(a.model, model)
        name = "mapfault-stream" if stream else "mapfault"
        d = S.Daemon(a.moeserve, model, work, name, "--kernels", "ref", "--threads", "2")
        try:
            d.wait_ready()
            cases(d, weights, stream)
        finally:
            rc = d.stop()
        S.case(f"{name}: exit 0 on SIGTERM after the fault", S.check, rc == 0, f"exit {rc}")
    shutil.rmtree(model, ignore_errors=True)
    return S.summary("mapfault-serve")


if __name__ == "__main__":
    sys.exit(main())
