-- load.lua: wrk script of tests/deploy/load.sh. POST /v1/completions with a small
-- token prompt (the token-id default model has no tokenizer) and max_tokens 8;
-- the first prompt token varies per request, and every 4th request streams
-- (the SSE path under load too). done() prints one machine-readable line.
local counter = 0

request = function()
  counter = counter + 1
  local stream = (counter % 4 == 0) and "true" or "false"
  local body = string.format(
    '{"prompt":[%d,17,42,99,3,250,7,11],"max_tokens":8,"temperature":0.8,"seed":%d,"stream":%s}',
    counter % 500, counter, stream)
  return wrk.format("POST", "/v1/completions", {["Content-Type"] = "application/json"}, body)
end

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "wrk-summary requests=%d bytes=%d duration_us=%d connect=%d read=%d write=%d status=%d timeout=%d " ..
    "latency_p50_us=%d latency_p99_us=%d latency_max_us=%d\n",
    summary.requests, summary.bytes, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(99), latency.max))
end
