#!/usr/bin/python3
"""The served checkpoint truncated under a running daemon (config/ms-mapguard.h),
over real HTTP:

    /usr/bin/python3 tests/mapfault_serve.py --moeserve BIN --model DIR [--workdir DIR]

--model: the random model (token-id prompts), copied, since the test
truncates it. The daemon runs the reference kernels, which read the bf16
weights in place from the mapping. After the truncation the next request
fails instead of killing the process with SIGBUS; /health turns 503
"failed" naming the file (with Retry-After); later requests are 503s; the
daemon still exits 0 on SIGTERM. Uses tests/server.py's daemon and checks.
"""
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server as S  # noqa: E402


def cases(d, weights):
    def truncated():
        st, _, j = d.post("/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 4})
        S.check_completion(st, j, S.TOKEN_MODEL, 1, 4)
        os.truncate(weights, 0)
        st, _, j = d.post("/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 4})
        S.check(d.proc.poll() is None, f"the daemon died ({d.proc.returncode})")
        S.check(st != 200 or j["choices"][0]["finish_reason"] == "error",
                f"an answer from lost weights: {st} {j}")
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

    S.case("mapfault: checkpoint truncated while serving: request fails, /health failed, alive",
           truncated, daemon=d)


def main():
    a = S.script_args(__doc__, "ms-mapfault-")
    work = a.workdir
    model = os.path.join(work, "model")
    shutil.rmtree(model, ignore_errors=True)
    shutil.copytree(a.model, model)
    S.TOKEN_MODEL = "model"
    weights = os.path.join(model, "model.safetensors")
    d = S.Daemon(a.moeserve, model, work, "mapfault", "--kernels", "ref", "--threads", "2")
    try:
        d.wait_ready()
        cases(d, weights)
    finally:
        rc = d.stop()
    S.case("mapfault: exit 0 on SIGTERM after the fault", S.check, rc == 0, f"exit {rc}")
    shutil.rmtree(model, ignore_errors=True)
    return S.summary("mapfault-serve")


if __name__ == "__main__":
    sys.exit(main())
