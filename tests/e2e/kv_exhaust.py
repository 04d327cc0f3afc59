#!/usr/bin/python3
"""KV-cache exhaustion under load, over real HTTP: `moeserve serve` with a
KV pool of 104 pages (room for two of the burst's requests at once) and a
burst of concurrent long requests, streamed and not.

    /usr/bin/python3 tests/e2e/kv_exhaust.py --moeserve BIN --model DIR [--workdir DIR]

--model is a checkpoint without tokenizer (the random model: token-id
prompts). Checked:
  - a request bigger than the whole pool is refused at once (400, the pages
    named), never queued;
  - every request of the burst ends within a bound with 200 (complete: all
    its max_tokens) or 429/503 with an integer Retry-After in [1, 60] and
    the OpenAI error envelope (the 503s: code kv_cache_exhausted); a stream
    is refused before its first byte (a status, not an SSE error);
  - at most the pool's two running plus one pool's worth queued are served
    from the burst; at least those two are;
  - afterwards /health is 200 and a normal request succeeds; the refusals
    are in /metrics;
  - every 503 of /health (a model that fails to load) carries Retry-After.
Uses tests/e2e/server.py's daemon and checks (the standard library only).
"""
import concurrent.futures
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server as S  # noqa: E402

POOL_PAGES = 104
PAGE_BYTES = 2 * 16 * 64 * 2  # K and V, 16 tokens, kv_dim 64 (the random model), bf16


def retry_after_ok(hd, where):
    ra = hd.get("retry-after")
    S.check(ra is not None and ra.isdigit() and 1 <= int(ra) <= 60,
            f"{where}: Retry-After {ra!r} (want whole seconds in [1, 60])")


def burst(d, n_req, max_tokens):
    """n_req concurrent requests, every third one streamed: (status,
    headers, body or {"chunks", "tokens"}, seconds)."""
    def one(k):
        body = {"prompt": [1 + k, 2, 3], "max_tokens": max_tokens, "temperature": 0,
                "logit_bias": S.NO_EOS}
        t = time.monotonic()
        if k % 3 == 2:
            s = S.SSE(d, "/v1/completions", {**body, "stream": True}, timeout=S.T(120))
            try:
                if s.status != 200:
                    return s.status, s.headers, json.loads(s.r.read()), time.monotonic() - t
                n, fin = 0, None
                for ev in s.events():
                    n += 1
                    for c in ev.get("choices", []):
                        fin = c.get("finish_reason") or fin
                return 200, s.headers, {"chunks": n, "finish": fin}, time.monotonic() - t
            finally:
                s.close()
        st, hd, j = d.post("/v1/completions", body, timeout=S.T(120))
        return st, hd, j, time.monotonic() - t

    with concurrent.futures.ThreadPoolExecutor(n_req) as ex:
        return list(ex.map(one, range(n_req)))


def exhaustion_cases(d):
    def pool_size():
        ms = d.metrics()
        pages = S.metric(ms, "moeserve:kv_cache_pages")
        S.check(pages == POOL_PAGES, f"kv_cache_pages {pages}, want {POOL_PAGES}")

    def never_fits():
        t = time.monotonic()
        st, hd, j = d.post("/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 4000})
        dt = time.monotonic() - t
        e = S.expect_error((st, hd, j), 400)
        S.check("KV pages" in e["message"] and str(POOL_PAGES) in e["message"],
                f"the refusal does not name the pages: {e['message']}")
        S.check(dt < S.T(5), f"refused after {dt:.1f} s, not at once")

    def exhausted():
        # 3 + 200 positions: 13 pages in each of the 4 layers (the sliding
        # ones hold 13 < 19) = 52 of the 104; two run, two wait (one pool's
        # worth), the rest are refused
        max_tokens, n_req = 200, 12
        d.wait_idle()  # from an idle daemon: the pool and the queue are the burst's
        res = burst(d, n_req, max_tokens)
        codes = [r[0] for r in res]
        S.check(all(c in (200, 429, 503) for c in codes), f"statuses {codes}")
        S.check(2 <= codes.count(200) <= 4, f"served {codes.count(200)}: {codes}")
        kv = 0
        for st, hd, j, dt in res:
            S.check(dt < S.T(90), f"a request took {dt:.1f} s")
            if st == 200:
                if "choices" in j:
                    S.check_completion(st, j, S.TOKEN_MODEL, 1, max_tokens)
                    S.check(j["usage"]["completion_tokens"] == max_tokens, f"cut short: {j['usage']}")
                else:
                    S.check(j["finish"] == "length", f"a stream ended with {j['finish']}")
                continue
            e = S.expect_error((st, hd, j), st)
            retry_after_ok(hd, f"{st} {e['message']}")
            if st == 503:
                S.check(e.get("code") == "kv_cache_exhausted", f"503 code {e.get('code')}")
                S.check("KV cache is exhausted" in e["message"], e["message"])
                kv += 1
        S.check(kv >= 1, f"no 503 for the exhausted KV cache: {codes}")
        ras = sorted({r[1].get("retry-after") for r in res if r[0] != 200})
        print(f"     statuses {codes}; Retry-After {ras}; slowest {max(r[3] for r in res):.2f} s")

    def afterwards():
        S.check(d.proc.poll() is None, "the daemon died")
        st, _, _ = d.json("GET", "/health")
        S.check(st == 200, f"/health after the burst: {st}")
        st, _, j = d.post("/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 4})
        S.check_completion(st, j, S.TOKEN_MODEL, 1, 4)
        ms = d.metrics()
        S.check(S.metric(ms, "moeserve:http_requests_total", status="503") >= 1,
                "the 503s are not counted")
        # a cancelled request's pages go back at the engine's next step: wait for it
        deadline = time.monotonic() + 10
        while S.metric(ms, "moeserve:kv_cache_usage_perc") != 0 and time.monotonic() < deadline:
            time.sleep(0.05)
            ms = d.metrics()
        S.check(S.metric(ms, "moeserve:kv_cache_usage_perc") == 0, "pages still held")

    S.case("kv: a pool of 104 pages", pool_size, daemon=d)
    S.case("kv: a request bigger than the pool: 400 at once", never_fits, daemon=d)
    S.case("kv: a burst of 12 x 200 tokens: 200 or 429/503 + Retry-After, none hangs",
           exhausted, daemon=d)
    S.case("kv: the daemon serves normally afterwards", afterwards, daemon=d)


def failed_cases(d):
    def health_503():
        d.wait_listening()
        deadline = time.monotonic() + S.T(30)
        while True:
            st, hd, j = d.json("GET", "/health")
            S.check(st == 503, f"/health {st}")
            retry_after_ok(hd, f"/health {j}")
            if j.get("status") == "failed":
                break
            S.check(time.monotonic() < deadline, "never failed")
            time.sleep(0.05)
        st, hd, j = d.post("/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 4})
        S.expect_error((st, hd, j), 503)
        retry_after_ok(hd, "POST while failed")

    S.case("kv: /health 503 (loading, failed) and requests then carry Retry-After", health_503,
           daemon=d)


def main():
    a = S.script_args(__doc__, "ms-kv-")
    work = a.workdir
    S.NO_EOS = S.no_eos(a.model)
    S.TOKEN_MODEL = os.path.basename(os.path.normpath(a.model))
    d = S.Daemon(a.moeserve, a.model, work, "kv", "--kv-cache-bytes", str(POOL_PAGES * PAGE_BYTES),
                 "--kv-dtype", "bf16", "--ctx-size", "4096", "--max-running", "8", "--max-queue", "64")
    try:
        d.wait_ready()
        exhaustion_cases(d)
    finally:
        d.stop()
    bad = os.path.join(work, "bad-model")
    os.makedirs(bad, exist_ok=True)
    with open(os.path.join(bad, "config.json"), "w") as f:
        f.write('{"architectures": ["GptOssForCausalLM"]}')
    d = S.Daemon(a.moeserve, bad, work, "kv-failed")
    try:
        failed_cases(d)
    finally:
        d.stop()
    return S.summary("kv-exhaust")


if __name__ == "__main__":
    sys.exit(main())
