#!/usr/bin/python3
"""/metrics as Prometheus reads it: `moeserve serve` on the random model,
some requests, then the exposition through `promtool check metrics`
(Debian's prometheus package; scripts/install-deps.sh installs it).

    /usr/bin/python3 tests/e2e/metrics_promtool.py --moeserve BIN --model DIR [--workdir DIR]

Checked:
  - promtool parses the text and lints nothing but the colon every
    vLLM-style name has;
  - every family has one HELP and one TYPE line, before its samples, and
    every sample belongs to a family of that name (histograms: _bucket,
    _sum, _count);
  - the families a gateway and vLLM's dashboards read exist with their
    types: num_requests_waiting, num_requests_running, kv_cache_usage_perc
    (gauges, the last in [0, 1]), inter_token_latency_seconds,
    e2e_request_latency_seconds, request_prefill_time_seconds,
    request_decode_time_seconds (histograms), prefix_cache_queries_total
    and prefix_cache_hits_total (counters, hits <= queries, hits > 0 after
    a repeated prompt);
  - scraping while requests run answers within a few milliseconds, and
    scraping 20 times a second beside a stream leaves its mean
    inter-token latency within 1.5x (the figures are printed);
  - the three gauges a gateway routes by are current within one engine
    step: with two batch slots and three streams, every scrape sent one
    step after the client saw a change (a stream's end, the waiting one's
    first token) shows it; the lag of each is printed in steps.
Exits 77 when promtool is not installed.
"""
import os
import re
import shutil
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server as S  # noqa: E402

WANT = {
    "moeserve:num_requests_waiting": "gauge", "moeserve:num_requests_running": "gauge",
    "moeserve:kv_cache_usage_perc": "gauge", "moeserve:inter_token_latency_seconds": "histogram",
    "moeserve:time_per_output_token_seconds": "histogram",
    "moeserve:e2e_request_latency_seconds": "histogram",
    "moeserve:request_prefill_time_seconds": "histogram",
    "moeserve:request_decode_time_seconds": "histogram",
    "moeserve:prefix_cache_queries_total": "counter", "moeserve:prefix_cache_hits_total": "counter",
}


def scrape(d):
    st, _, data = d.request("GET", "/metrics")
    S.check(st == 200, f"/metrics: {st}")
    return data.decode()


def promtool(text):
    r = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True,
                       timeout=60)
    lines = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.strip()]
    other = [ln for ln in lines if not ln.endswith("metric names should not contain ':'")]
    # 0: clean, 3: lint problems only (the colons); anything else did not parse
    S.check(r.returncode in (0, 3) and not other,
            f"promtool exit {r.returncode}:\n  " + "\n  ".join(other[:20]))
    print(f"     promtool: {len(lines)} lint lines, all the colon convention")


def families(text):
    """{name: type}, checking HELP and TYPE once each, before the samples."""
    help_, type_, seen = {}, {}, set()
    for ln in text.splitlines():
        m = re.match(r"# (HELP|TYPE) (\S+) (.*)", ln)
        if m:
            d = help_ if m.group(1) == "HELP" else type_
            S.check(m.group(2) not in d, f"two {m.group(1)} lines for {m.group(2)}")
            S.check(m.group(2) not in seen, f"{m.group(1)} of {m.group(2)} after its samples")
            d[m.group(2)] = m.group(3)
            continue
        if not ln or ln.startswith("#"):
            continue
        name = re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", ln).group(0)
        fam = re.sub(r"_(bucket|sum|count)$", "", name) if name not in type_ else name
        S.check(fam in type_ and fam in help_, f"a sample of no family: {ln[:120]}")
        seen.add(fam)
    S.check(set(help_) == set(type_), f"HELP without TYPE: {set(help_) ^ set(type_)}")
    return type_


def contract(d):
    body = {"prompt": [5, 6, 7, 8] * 8, "max_tokens": 8, "temperature": 0}
    for _ in range(3):  # the same prompt: the prefix cache hits
        st, _, j = d.post("/v1/completions", body)
        S.check(st == 200, f"{st} {j}")
    text = scrape(d)
    promtool(text)
    types = families(text)
    for name, t in WANT.items():
        S.check(types.get(name) == t, f"{name}: type {types.get(name)}, want {t}")
    ms = S.parse_metrics(text)
    usage = S.metric(ms, "moeserve:kv_cache_usage_perc")
    S.check(0 <= usage <= 1, f"kv_cache_usage_perc {usage}")
    q = S.metric(ms, "moeserve:prefix_cache_queries_total")
    h = S.metric(ms, "moeserve:prefix_cache_hits_total")
    S.check(0 < h <= q, f"prefix cache: {h} hits of {q} queries")
    # a request is counted as it finishes, which may follow its answer
    deadline = time.monotonic() + S.T(5)
    while S.metric(ms, "moeserve:request_decode_time_seconds_count") < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
        ms = S.parse_metrics(scrape(d))
    n = S.metric(ms, "moeserve:request_decode_time_seconds_count")
    S.check(n >= 3, f"request_decode_time_seconds counted {n} requests")


def scrape_under_load(d):
    n = S.tokens_for(d, 2.0)
    stop = threading.Event()

    def load():
        while not stop.is_set():
            d.post("/v1/completions", {"prompt": [1, 2, 3], "max_tokens": n, "logit_bias": S.NO_EOS})

    ths = [threading.Thread(target=load) for _ in range(3)]
    for t in ths:
        t.start()
    try:
        d.wait_running(1, "the load")
        worst = 0.0
        for _ in range(40):
            t = time.monotonic()
            text = scrape(d)
            worst = max(worst, time.monotonic() - t)
            S.check("moeserve:num_requests_running" in text, "a scrape without the gauges")
            time.sleep(0.05)
        print(f"     40 scrapes under load: the slowest {worst * 1000:.1f} ms")
        S.check(worst < S.T(0.25), f"a scrape took {worst * 1000:.0f} ms under load")
    finally:
        stop.set()
        for t in ths:
            t.join(S.T(60))


def itl_with_scrapes(d):
    # the inter-token latency of a stream alone, then with /metrics scraped
    # 20 times a second beside it (a Prometheus and a gateway at once)
    n = S.tokens_for(d, 1.5)
    body = {"prompt": [1, 2, 3], "max_tokens": n, "logit_bias": S.NO_EOS, "stream": True,
            "logprobs": 0, "temperature": 0}

    def itl():
        s = S.SSE(d, "/v1/completions", body, timeout=S.T(120))
        times = [time.monotonic() for _ in s.events()]
        s.close()
        # the mean: a read may bring several tokens' chunks at once
        return (times[-1] - times[0]) / (len(times) - 1)

    alone = min(itl() for _ in range(2))
    stop = threading.Event()

    def scrape_loop():
        while not stop.is_set():
            scrape(d)
            time.sleep(0.05)

    t = threading.Thread(target=scrape_loop)
    t.start()
    try:
        scraped = min(itl() for _ in range(2))
    finally:
        stop.set()
        t.join()
    print(f"     mean inter-token latency {alone * 1000:.3f} ms alone, {scraped * 1000:.3f} ms with "
          f"20 scrapes/s ({scraped / alone:.2f}x)")
    S.check(scraped < alone * 1.5 + 0.001, "scraping 20 times a second moved the inter-token latency")


# (running, waiting) -> how far the three streams of gauges_current have
# got: A and B run and C waits; A's end is published but C is not yet
# admitted (one step); C runs; one of B and C ended; none is left.
PHASE = {(2, 1): 0, (1, 1): 0.5, (2, 0): 1, (1, 0): 2, (0, 0): 3}


def gauges_current(d, a):
    d2 = S.Daemon(a.moeserve, a.model, a.workdir, "promtool-slots", "--threads", "2",
                  "--max-running", "2")
    try:
        d2.wait_ready(S.T(60))
        n = S.tokens_for(d2, 0.25)
        events, scrapes = gauge_run(d2, n)
    finally:
        d2.stop()
    gauge_verdict(events, scrapes)


def gauge_run(d, n):
    """Streams A (2n tokens) and B (4n) on the two slots, then C (n), which
    waits for A; /metrics scraped from C's submission on. Returns the
    client's events [(time, the phase the gauges must show a step later,
    the step's length)] and the scrapes [(sent, phase, kv usage)]."""
    times = {k: [] for k in "ABC"}
    ends, c_in = {}, threading.Event()

    def stream(k, tokens):
        body = {"prompt": [1, 2, 3, ord(k)], "max_tokens": tokens, "logit_bias": S.NO_EOS,
                "stream": True, "temperature": 0}
        s = S.SSE(d, "/v1/completions", body, timeout=S.T(120))
        times[k].append(time.monotonic())  # its headers follow its submission
        if k == "C":
            c_in.set()
        for j in s.events():
            times[k].append(time.monotonic())
            if j["choices"] and j["choices"][0].get("finish_reason"):
                ends[k] = times[k][-1]
        s.close()

    scrapes, stop = [], threading.Event()

    def scraper():
        while not stop.is_set():
            t = time.monotonic()
            ms = S.parse_metrics(scrape(d))
            rw = (S.metric(ms, "moeserve:num_requests_running"),
                  S.metric(ms, "moeserve:num_requests_waiting"))
            S.check(rw in PHASE, f"gauges in no phase: {rw[0]:.0f} running, {rw[1]:.0f} waiting")
            scrapes.append((t, PHASE[rw], S.metric(ms, "moeserve:kv_cache_usage_perc")))
            time.sleep(0.002)

    ths = [threading.Thread(target=stream, args=k) for k in (("A", 2 * n), ("B", 4 * n), ("C", n))]
    for i, t in enumerate(ths):
        t.start()
        if i < 2:
            d.wait_running(i + 1, "streams A and B")
    sc = threading.Thread(target=scraper)
    S.check(c_in.wait(S.T(30)), "stream C was not answered")
    sc.start()
    for t in ths:
        t.join(S.T(120))
    time.sleep(0.2)
    stop.set()
    sc.join()
    S.check(set(ends) == set("ABC"), f"streams that did not finish: {set('ABC') - set(ends)}")
    S.check(times["C"][1] > ends["A"], "C ran before A ended")
    events = [(times["C"][0], 0), (ends["A"], 0.5), (times["C"][1], 1),
              (min(ends["B"], ends["C"]), 2), (max(ends["B"], ends["C"]), 3)]
    return [(t, ph, step_near(times, t)) for t, ph in events], scrapes


def step_near(times, t):
    """One engine step about t: the longest gap between two chunks of any
    stream within 0.5 s of it (a step's length swings on a busy machine)."""
    gaps = [b - a for ts in times.values() for a, b in zip(ts[1:], ts[2:]) if abs(b - t) < 0.5]
    return max(gaps, default=0.05)


def gauge_verdict(events, scrapes):
    """Each scrape sent a step after an event shows it; the scrapes from
    one step after C's submission never go back (a waiting gauge that
    missed C would show A and B alone, then C waiting)."""
    t0 = events[0][0] + events[0][2]
    phases = [ph for t, ph, _ in scrapes if t >= t0]
    back = [(a, b) for a, b in zip(phases, phases[1:]) if b < a]
    S.check(phases and not back, f"the gauges went back from phase {back[:1]} ({len(phases)} scrapes)")
    worst = 0.0
    for t, ph, step in events:
        after = [x for x in scrapes if x[0] >= t + step]
        S.check(after, f"no scrape a step after phase {ph}")
        late = [x for x in after if x[1] < ph]
        S.check(not late, f"phase {ph}: a scrape sent {((late or after)[0][0] - t) / step:.1f} steps "
                f"after the client saw it showed phase {(late or after)[0][1]}")
        seen = next(x[0] for x in scrapes if x[1] >= ph)
        worst = max(worst, (seen - t) / step)
    busy = [u for _, ph, u in scrapes if ph < 3]
    idle = [u for t, ph, u in scrapes if t >= events[-1][0] + events[-1][2]]
    S.check(busy and min(busy) > 0, "kv_cache_usage_perc 0 while requests ran")
    S.check(idle and max(idle) == 0, f"kv_cache_usage_perc {max(idle or [1])} with nothing running")
    print(f"     {len(phases)} scrapes beside 3 streams on 2 slots: each change showed at most "
          f"{max(worst, 0):.2f} steps after the client saw it (bound 1)")


def main():
    a = S.script_args(__doc__, "ms-promtool.")
    if not shutil.which("promtool"):
        print("metrics-promtool: promtool is not installed (scripts/install-deps.sh installs "
              "Debian's prometheus)")
        return 77
    S.NO_EOS = S.no_eos(a.model)
    t0 = time.monotonic()
    d = S.Daemon(a.moeserve, a.model, a.workdir, "promtool", "--threads", "2")
    try:
        d.wait_ready(S.T(60))
        S.case("/metrics through promtool; the families a gateway reads", contract, d, daemon=d)
        S.case("/metrics answers at once under load", scrape_under_load, d, daemon=d)
        S.case("20 scrapes a second leave the inter-token latency alone", itl_with_scrapes, d, daemon=d)
        S.case("the gateway's gauges are current within one step", gauges_current, d, a, daemon=d)
    finally:
        d.stop()
        if d.failed:
            d.print_log()
    return S.summary("metrics-promtool", t0)


if __name__ == "__main__":
    sys.exit(main())
