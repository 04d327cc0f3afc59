// anthropic_sdk.mjs: client compatibility of `moeserve serve`'s Messages API
// with the official `@anthropic-ai/sdk` npm SDK (pinned in
// tests/clients/npm-anthropic/package-lock.json).
//
//   tools/npm-ci.sh tests/clients/npm-anthropic -- node tests/clients/anthropic_sdk.mjs --base-url http://127.0.0.1:PORT --model NAME [--api-key KEY]
//       against a daemon that is already running (NAME: its served model id;
//       the auth case needs --api-key, the daemon's)
//   tools/npm-ci.sh tests/clients/npm-anthropic -- node tests/clients/anthropic_sdk.mjs --moeserve BIN --model-dir DIR [--timeout S]
//       starts BIN serve on a free loopback port with DIR (a chat-capable
//       checkpoint: tokenizer.json with the harmony tokens), an --api-key,
//       --max-tokens 32 (the ceiling of every max_tokens: a random-weight
//       model never stops) and --ctx-size 4096, runs the checks, then stops
//       it with SIGTERM (it must exit 0)
//
// The SDK's typed calls (messages.create streamed and not, the stream
// helper that accumulates the events, countTokens, models.list, the beta
// surface's ?beta=true; thinking, tools and tool_choice, stop_sequences;
// typed errors) must parse every response, and the shapes are asserted:
// message ids, block types in their order, stop_reason and stop_sequence,
// usage (input_tokens + cache_read_input_tokens is what countTokens says of
// the same body). Sampling is greedy (temperature 0), so a streamed request
// must give the message of the same request not streamed. This SDK sends its
// key as "Authorization: Bearer"; the "x-api-key" of other clients (Claude
// Code) is checked with fetch, as are the SSE `event:` names, which the SDK
// does not read.
//
// The SDK comes from tests/clients/npm-anthropic: the meson test runs this
// script through `tools/npm-ci.sh tests/clients/npm-anthropic --`, which runs
// `npm ci` there when node_modules is not from the lockfile; if that fails,
// the test fails (it is not skipped).
//
// One line per case, then "anthropic-sdk: P passed, F failed"; exit status 0
// when F = 0, 1 otherwise, 2 on usage errors. The command line, the daemon
// and these lines are sdk_harness.mjs's, shared with openai_sdk.mjs.

import crypto from "node:crypto";
import { Cases, assert, importSdk, parseArgs, startDaemon } from "./sdk_harness.mjs";

const PKG = "@anthropic-ai/sdk";
const { args, timeoutS } = parseArgs("anthropic_sdk.mjs");

// ---- a daemon of our own (--moeserve) ----

// the context of our daemon: small, so that the too-long prompt is cheap
const CTX = 4096;

// ---- assertions ----

const STOP = ["end_turn", "max_tokens", "stop_sequence", "tool_use"];
const BLOCKS = ["thinking", "text", "tool_use"];
const USAGE = ["input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"];
const show = (x) => JSON.stringify(x).slice(0, 400);

// a message as the API documents it; returns it. Ids are never reused:
// Claude Code's transcript keys the answers by them.
const ids = new Set();
function checkMessage(m, model, where, { maxTokens } = {}) {
  assert(m && typeof m.id === "string" && m.id.startsWith("msg_") && m.id.length > 4, `${where}: id ${show(m?.id)}`);
  assert(!ids.has(m.id), `${where}: id ${m.id} again`);
  ids.add(m.id);
  assert(m.type === "message" && m.role === "assistant", `${where}: type ${m.type}, role ${m.role}`);
  assert(m.model === model, `${where}: model ${show(m.model)}, want ${model}`);
  assert(Array.isArray(m.content), `${where}: content is not a list`);
  for (const b of m.content) {
    assert(BLOCKS.includes(b.type), `${where}: block ${show(b)}`);
    if (b.type === "text") assert(typeof b.text === "string", `${where}: text block ${show(b)}`);
    if (b.type === "thinking")
      assert(typeof b.thinking === "string" && typeof b.signature === "string" && b.signature.length > 0,
             `${where}: thinking block without a signature ${show(b)}`);
    if (b.type === "tool_use")
      assert(typeof b.id === "string" && b.id.startsWith("toolu_") && typeof b.name === "string" &&
             b.input && typeof b.input === "object" && !Array.isArray(b.input), `${where}: tool_use block ${show(b)}`);
  }
  assert(STOP.includes(m.stop_reason), `${where}: stop_reason ${show(m.stop_reason)}`);
  if (m.stop_reason === "stop_sequence") assert(typeof m.stop_sequence === "string", `${where}: stop_sequence ${show(m.stop_sequence)}`);
  else assert(m.stop_sequence === null, `${where}: stop_sequence ${show(m.stop_sequence)} with stop_reason ${m.stop_reason}`);
  if (m.stop_reason === "tool_use") assert(m.content.some((b) => b.type === "tool_use"), `${where}: stop_reason tool_use without a tool_use block`);
  const u = m.usage;
  for (const f of USAGE)
    assert(Number.isInteger(u?.[f]) && u[f] >= 0, `${where}: usage.${f} = ${show(u?.[f])}`);
  assert(u.input_tokens + u.cache_read_input_tokens > 0, `${where}: no prompt tokens ${show(u)}`);
  assert(u.cache_creation_input_tokens === 0, `${where}: cache_creation_input_tokens ${u.cache_creation_input_tokens}`);
  if (maxTokens !== undefined)
    assert(u.output_tokens <= maxTokens, `${where}: ${u.output_tokens} output tokens > max_tokens ${maxTokens}`);
  return m;
}

// what two answers of the same greedy request must share
function sameAnswer(a, b, where) {
  const strip = (m) => m.content.map((x) => x.type === "tool_use" ? { type: x.type, name: x.name, input: x.input } : x);
  assert(show(strip(a)) === show(strip(b)), `${where}: content ${show(strip(a))} != ${show(strip(b))}`);
  assert(a.stop_reason === b.stop_reason && a.stop_sequence === b.stop_sequence,
         `${where}: stop_reason ${a.stop_reason} != ${b.stop_reason}`);
  assert(a.usage.output_tokens === b.usage.output_tokens,
         `${where}: output_tokens ${a.usage.output_tokens} != ${b.usage.output_tokens}`);
}

// The stream's events (data objects, pings left out) in the documented
// order: message_start; per block, in index order, content_block_start,
// its deltas of its kind, content_block_stop; one message_delta;
// message_stop. Returns the blocks' types.
const DELTAS = { text: ["text_delta"], thinking: ["thinking_delta", "signature_delta"], tool_use: ["input_json_delta"] };
function checkOrder(evs, where) {
  const types = evs.map((e) => e.type);
  const fail = (what) => { throw new Error(`${where}: ${what}; events ${types.join(",")}`); };
  if (types[0] !== "message_start") fail("not message_start first");
  if (types.at(-1) !== "message_stop") fail("not message_stop last");
  if (types.at(-2) !== "message_delta") fail("not message_delta before message_stop");
  const blocks = [];
  let open = null;
  for (const e of evs.slice(1, -2)) {
    if (e.type === "content_block_start") {
      if (open) fail(`block ${e.index} starts before block ${open.index} stops`);
      if (e.index !== blocks.length) fail(`block index ${e.index}, want ${blocks.length}`);
      open = { index: e.index, type: e.content_block?.type };
      blocks.push(open.type);
    } else if (e.type === "content_block_delta") {
      if (!open || e.index !== open.index) fail(`a delta of block ${e.index} outside it`);
      if (!DELTAS[open.type]?.includes(e.delta?.type)) fail(`a ${e.delta?.type} in a ${open.type} block`);
    } else if (e.type === "content_block_stop") {
      if (!open || e.index !== open.index) fail(`a stop of block ${e.index} that is not open`);
      open = null;
    } else {
      fail(`${e.type} among the blocks`);
    }
  }
  if (open) fail(`block ${open.index} never stops`);
  return blocks;
}

// "event: NAME" / "data: JSON" records of an SSE body
function parseSSE(text) {
  const out = [];
  for (const rec of text.split(/\r?\n\r?\n/)) {
    let event = null, data = "";
    for (const line of rec.split(/\r?\n/)) {
      if (line.startsWith("event:")) event = line.slice(6).trim();
      else if (line.startsWith("data:")) data += line.slice(5).trimStart();
    }
    if (event !== null || data) out.push({ event, data });
  }
  return out;
}

const textOf = (m) => m.content.filter((b) => b.type === "text").map((b) => b.text).join("");

// ---- the cases ----

async function run(cases, Anthropic, baseURL, model, apiKey, ctx) {
  const client = new Anthropic({ baseURL, apiKey: apiKey ?? "unused", maxRetries: 0, timeout: timeoutS * 1000 });
  const test = (name, fn) => cases.test(name, fn);
  // fetch with the x-api-key header of Anthropic's other clients (auth
  // "bearer": this SDK's header instead; "none": no key)
  const raw = (p, body, auth = "x-api-key") => fetch(`${baseURL}${p}`, {
    method: "POST",
    headers: { "content-type": "application/json", "anthropic-version": "2023-06-01",
               ...(apiKey && auth === "x-api-key" ? { "x-api-key": apiKey } : {}),
               ...(apiKey && auth === "bearer" ? { authorization: `Bearer ${apiKey}` } : {}) },
    body: JSON.stringify(body),
  });

  const system = "You are a terse assistant.";
  const messages = [{ role: "user", content: "Say hello in three words." }];
  const base = { model, max_tokens: 24, temperature: 0, system, messages };
  let plain = null;

  await test("messages.create (not streamed), countTokens of the same body", async () => {
    const m = checkMessage(await client.messages.create(base), model, "create", { maxTokens: 24 });
    assert(m.content.every((b) => b.type === "text"), `blocks ${show(m.content)} without thinking or tools`);
    assert(m.stop_reason !== "tool_use", "stop_reason tool_use without tools");
    const n = await client.messages.countTokens({ model, system, messages });
    assert(Number.isInteger(n.input_tokens) && n.input_tokens > 0, `countTokens ${show(n)}`);
    const u = m.usage;
    assert(u.input_tokens + u.cache_read_input_tokens === n.input_tokens,
           `input_tokens ${u.input_tokens} + cache_read ${u.cache_read_input_tokens} != countTokens ${n.input_tokens}`);
    plain = m;
    return `${u.output_tokens} output tokens, ${m.stop_reason}`;
  });

  await test("messages.create: the same body again reads the prompt cache, any model name", async () => {
    // Anthropic's clients send their own model names: the one model serves them
    const m = checkMessage(await client.messages.create({ ...base, model: "claude-any-name" }), model, "again", { maxTokens: 24 });
    const n = await client.messages.countTokens({ model, system, messages });
    const u = m.usage;
    assert(u.input_tokens + u.cache_read_input_tokens === n.input_tokens,
           `input_tokens ${u.input_tokens} + cache_read ${u.cache_read_input_tokens} != countTokens ${n.input_tokens}`);
    // our daemon's prefix cache holds the first request's prompt (another's
    // may have evicted it)
    if (ctx) assert(u.cache_read_input_tokens > 0, `nothing read from the cache: ${show(u)}`);
    if (plain) sameAnswer(m, plain, "the repeat");
    return `cache_read_input_tokens ${u.cache_read_input_tokens} of ${n.input_tokens}`;
  });

  await test("messages.create: system as a string and as text blocks", async () => {
    const blocks = [{ type: "text", text: system }];
    const a = checkMessage(await client.messages.create({ ...base, system: blocks }), model, "system blocks");
    const nb = await client.messages.countTokens({ model, system: blocks, messages });
    const ns = await client.messages.countTokens({ model, system, messages });
    const nn = await client.messages.countTokens({ model, messages });
    assert(nb.input_tokens === ns.input_tokens, `countTokens: blocks ${nb.input_tokens} != string ${ns.input_tokens}`);
    assert(ns.input_tokens > nn.input_tokens, `countTokens: with system ${ns.input_tokens} <= without ${nn.input_tokens}`);
    if (plain) sameAnswer(a, plain, "system blocks vs string");
  });

  await test("messages.stream: events in order, finalMessage equals the unstreamed answer", async () => {
    const stream = client.messages.stream(base);
    const evs = [];
    let text = "";
    stream.on("streamEvent", (ev) => evs.push(ev));
    stream.on("text", (d) => { text += d; });
    const m = checkMessage(await stream.finalMessage(), model, "stream", { maxTokens: 24 });
    const blocks = checkOrder(evs, "stream");
    assert(show(blocks) === show(m.content.map((b) => b.type)), `block events ${show(blocks)} != content ${show(m.content)}`);
    assert(text === textOf(m), `text deltas ${show(text)} != ${show(textOf(m))}`);
    assert(evs[0].message.id === m.id && evs.at(-2).delta.stop_reason === m.stop_reason,
           `message_start / message_delta ${show(evs[0])} ${show(evs.at(-2))}`);
    // the prompt is the same in message_start's usage and the final one
    const prompt = (u) => u.input_tokens + (u.cache_read_input_tokens ?? 0);
    assert(prompt(evs[0].message.usage) === prompt(m.usage),
           `message_start usage ${show(evs[0].message.usage)}, final ${show(m.usage)}`);
    if (plain) sameAnswer(m, plain, "streamed vs not");
    return `${evs.length} events`;
  });

  await test("stream: raw SSE with x-api-key, event names match their data", async () => {
    const r = await raw("/v1/messages", { ...base, stream: true });
    const body = await r.text();
    assert(r.status === 200, `status ${r.status}: ${body.slice(0, 400)}`);
    assert((r.headers.get("content-type") ?? "").startsWith("text/event-stream"), `content-type ${r.headers.get("content-type")}`);
    const recs = parseSSE(body), evs = [];
    for (const { event, data } of recs) {
      const d = JSON.parse(data);
      assert(event === d.type, `event: ${event} with data of type ${d.type}`);
      if (event !== "ping") evs.push(d);
    }
    checkOrder(evs, "raw stream");
    const usage = evs.at(-2).usage;
    assert(Number.isInteger(usage?.output_tokens), `message_delta usage ${show(usage)}`);
    if (plain) assert(usage.output_tokens === plain.usage.output_tokens, `output_tokens ${usage.output_tokens} != ${plain.usage.output_tokens}`);
  });

  await test("beta.messages.create (?beta=true)", async () => {
    const m = checkMessage(await client.beta.messages.create({ ...base, betas: ["interleaved-thinking-2025-05-14"] }),
                           model, "beta", { maxTokens: 24 });
    if (plain) sameAnswer(m, plain, "beta vs not");
  });

  const tools = [{
    name: "get_weather",
    description: "Current weather in a city",
    input_schema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  }];
  const weather = [{ role: "user", content: "Weather in Paris?" }];

  await test("thinking enabled: shapes, the answer sent back in a second turn", async () => {
    const body = { model, max_tokens: 2200, temperature: 0, thinking: { type: "enabled", budget_tokens: 2048 },
                   messages: [{ role: "user", content: "Think, then say hello." }] };
    const m = checkMessage(await client.messages.create(body), model, "thinking");
    const th = m.content.filter((b) => b.type === "thinking");
    const next = await client.messages.create({
      ...body, messages: [...body.messages, { role: "assistant", content: m.content }, { role: "user", content: "Again." }] });
    checkMessage(next, model, "thinking, second turn");
    return `${th.length} thinking block(s)`;
  });

  // The random model writes an analysis only on the way to a forced call
  // (the daemon steers that path through harmony's channels), so thinking
  // blocks are asserted there: signed, before the call, and sent back with
  // the tool_result as Claude Code does.
  const thinkTool = (thinking) => ({ model, max_tokens: 2200, temperature: 0, thinking, tools,
                                     tool_choice: { type: "any" }, messages: weather });
  const backTurn = (content) => [...weather, { role: "assistant", content },
    { role: "user", content: content.filter((b) => b.type === "tool_use")
                                    .map((b) => ({ type: "tool_result", tool_use_id: b.id, content: "21 C" })) }];

  await test("thinking enabled with a forced call: signed thinking blocks, sent back with the tool_result", async () => {
    const m = checkMessage(await client.messages.create(thinkTool({ type: "enabled", budget_tokens: 2048 })),
                           model, "thinking + call");
    const types = m.content.map((b) => b.type);
    assert(types[0] === "thinking" && types.includes("tool_use") && m.stop_reason === "tool_use",
           `blocks ${show(types)}, stop_reason ${m.stop_reason}`);
    for (const b of m.content.filter((b) => b.type === "thinking"))
      assert(b.thinking.length > 0, `an empty thinking block ${show(b)} without display omitted`);
    const next = await client.messages.create({ ...thinkTool({ type: "enabled", budget_tokens: 2048 }),
                                                tool_choice: { type: "auto" }, messages: backTurn(m.content) });
    checkMessage(next, model, "the tool_result turn");
    return `blocks ${types.join(",")}`;
  });

  await test("thinking adaptive, display omitted: text \"\", the signature carries it", async () => {
    const omitted = thinkTool({ type: "adaptive", display: "omitted" });
    const m = checkMessage(await client.messages.create(omitted), model, "omitted");
    const shown = checkMessage(await client.messages.create(thinkTool({ type: "adaptive" })), model, "shown");
    const th = m.content.filter((b) => b.type === "thinking"), ths = shown.content.filter((b) => b.type === "thinking");
    assert(th.length >= 1 && th.length === ths.length, `thinking blocks: ${th.length} omitted, ${ths.length} shown`);
    th.forEach((b, i) => {
      assert(b.thinking === "" && b.signature.length > 0, `omitted block ${show(b)}`);
      assert(ths[i].thinking.length > 0 && ths[i].signature === b.signature,
             `block ${i}: shown ${show(ths[i])} vs omitted ${show(b)}`);
    });
    // streamed: no thinking text in the deltas, the signature in one
    const stream = client.messages.stream(omitted);
    const evs = [];
    stream.on("streamEvent", (ev) => evs.push(ev));
    const s = await stream.finalMessage();
    checkOrder(evs, "omitted stream");
    const deltas = evs.filter((e) => e.type === "content_block_delta");
    assert(!deltas.some((e) => e.delta.type === "thinking_delta" && e.delta.thinking !== ""),
           "a thinking_delta with text under display omitted");
    assert(deltas.some((e) => e.delta.type === "signature_delta" && e.delta.signature.length > 0), "no signature_delta");
    sameAnswer(s, m, "omitted: streamed vs not");
    // sent back, the omitted blocks are the shown ones: the same prompt
    const count = (content) => client.messages.countTokens({ model, thinking: { type: "adaptive" }, tools,
                                                             messages: backTurn(content) });
    const no = await count(m.content), yes = await count(shown.content);
    const without = await count(m.content.filter((b) => b.type !== "thinking"));
    assert(no.input_tokens === yes.input_tokens && no.input_tokens > without.input_tokens,
           `sent back: omitted ${no.input_tokens}, shown ${yes.input_tokens}, no thinking ${without.input_tokens} tokens`);
    return `${th.length} thinking block(s)`;
  });

  await test("tools: tool_choice tool, then the tool_result turn", async () => {
    const m = checkMessage(await client.messages.create({
      model, max_tokens: 32, temperature: 0, tools, tool_choice: { type: "tool", name: "get_weather" },
      messages: weather }), model, "forced tool");
    const calls = m.content.filter((b) => b.type === "tool_use");
    assert(calls.length >= 1 && calls.every((b) => b.name === "get_weather"), `blocks ${show(m.content)}`);
    assert(m.stop_reason === "tool_use", `stop_reason ${m.stop_reason}`);
    const next = await client.messages.create({
      model, max_tokens: 16, temperature: 0, tools, messages: [
        ...weather, { role: "assistant", content: m.content },
        { role: "user", content: calls.map((b) => ({ type: "tool_result", tool_use_id: b.id, content: "21 C, sunny" })) }] });
    checkMessage(next, model, "tool_result turn", { maxTokens: 16 });
    return `input ${show(calls[0].input)}`;
  });

  await test("tools: tool_choice any (streamed: input_json_delta)", async () => {
    const body = { model, max_tokens: 32, temperature: 0, tools, tool_choice: { type: "any" }, messages: weather };
    const m = checkMessage(await client.messages.create(body), model, "tool_choice any");
    assert(m.content.some((b) => b.type === "tool_use") && m.stop_reason === "tool_use", `answer ${show(m)}`);
    const stream = client.messages.stream(body);
    const evs = [];
    stream.on("streamEvent", (ev) => evs.push(ev));
    const s = await stream.finalMessage();
    const blocks = checkOrder(evs, "tool_choice any stream");
    assert(blocks.includes("tool_use"), `streamed blocks ${show(blocks)}`);
    sameAnswer(s, m, "tool_choice any: streamed vs not");
  });

  await test("stop_sequences: a string of the first answer stops the second", async () => {
    const body = { model, max_tokens: 32, temperature: 0, messages: [{ role: "user", content: "Count to twenty." }] };
    const first = checkMessage(await client.messages.create(body), model, "without stop");
    const t = textOf(first);
    // a few characters from the middle, not only spaces
    let stop = null;
    for (let k = Math.floor(t.length / 2); k + 3 <= t.length && !stop; k++)
      if (t.slice(k, k + 3).trim().length >= 2) stop = t.slice(k, k + 3);
    if (t.length < 8 || !stop) return `skip the first answer's text is too short: ${show(t)}`;
    // a second sequence that never comes: the one that matched is named
    const never = "\u00a7never\u00a7";
    assert(!t.includes(never), "the never-sequence is in the text");
    const m = checkMessage(await client.messages.create({ ...body, stop_sequences: [never, stop] }), model, "with stop");
    assert(m.stop_reason === "stop_sequence" && m.stop_sequence === stop,
           `stop_reason ${m.stop_reason}, stop_sequence ${show(m.stop_sequence)}, want ${show(stop)}`);
    // the text up to the stop, without it
    assert(textOf(m) === t.slice(0, t.indexOf(stop)), `text ${show(textOf(m))}, want ${show(t.slice(0, t.indexOf(stop)))}`);
    return `stop ${show(stop)}`;
  });

  await test("models.list", async () => {
    const page = await client.models.list();
    assert(Array.isArray(page.data) && page.data.length >= 1, `models ${show(page.data)}`);
    const m = page.data.find((x) => x.id === model);
    assert(m, `models.list ${show(page.data.map((x) => x.id))} lacks ${model}`);
    assert(m.type === "model" && typeof m.display_name === "string" && m.display_name.length > 0 &&
           typeof m.created_at === "string" && !Number.isNaN(Date.parse(m.created_at)), `model ${show(m)}`);
  });

  await test("typed errors: missing max_tokens (400), a prompt past the context (400)", async () => {
    try {
      await client.messages.create({ model, messages });
      throw new Error("a request without max_tokens was accepted");
    } catch (e) {
      assert(e instanceof Anthropic.BadRequestError, `not a BadRequestError: ${e}`);
      assert(e.status === 400 && e.error?.type === "error" && e.error?.error?.type === "invalid_request_error" &&
             /max_tokens/.test(e.error.error.message), `400 error ${show(e.error)}`);
    }
    // numbers tokenize to about a token per three characters: far past any context
    let long = "";
    for (let i = 100000; long.length < 400000; i++) long += ` ${i}`;
    try {
      await client.messages.create({ model, max_tokens: 8, messages: [{ role: "user", content: long }] });
      throw new Error(`a prompt of ${long.length} characters was accepted${ctx ? ` (context ${ctx})` : ""}`);
    } catch (e) {
      assert(e instanceof Anthropic.BadRequestError, `not a BadRequestError: ${e}`);
      assert(e.error?.error?.type === "invalid_request_error" && /^prompt is too long/.test(e.error.error.message),
             `400 error ${show(e.error)}`);
    }
  });

  await test("auth: x-api-key and Bearer accepted, a wrong key is AuthenticationError (401)", async () => {
    if (!apiKey) return "skip no --api-key: the daemon's auth is not known";
    const ok = await raw("/v1/messages/count_tokens", { model, messages });
    assert(ok.status === 200, `x-api-key: ${ok.status} ${await ok.text()}`);
    const bearer = await raw("/v1/messages/count_tokens", { model, messages }, "bearer");
    assert(bearer.status === 200, `Bearer: ${bearer.status} ${await bearer.text()}`);
    const wrong = new Anthropic({ baseURL, apiKey: `${apiKey}-wrong`, maxRetries: 0, timeout: timeoutS * 1000 });
    try {
      await wrong.messages.create(base);
      throw new Error("a wrong key was accepted");
    } catch (e) {
      assert(e instanceof Anthropic.AuthenticationError, `not an AuthenticationError: ${e}`);
      assert(e.status === 401 && e.error?.error?.type === "authentication_error", `401 error ${show(e.error)}`);
    }
    const none = await raw("/v1/messages", base, "none");
    const nb = await none.json().catch(() => null);
    assert(none.status === 401 && nb?.type === "error" && nb.error?.type === "authentication_error",
           `no key: ${none.status} ${show(nb)}`);
  });
}

// ---- main ----

const { default: Anthropic } = await importSdk("anthropic-sdk", "npm-anthropic", PKG);

const cases = new Cases("anthropic-sdk");
// the SDK appends /v1/...: the base URL is the daemon's root
let daemon = null, baseURL = args["base-url"]?.replace(/\/+$/, "").replace(/\/v1$/, ""), model = args.model;
let apiKey = args["api-key"], ctx = null;
try {
  if (args.moeserve) {
    model = "moeserve-anthropic-test";
    apiKey = `sk-test-${crypto.randomBytes(8).toString("hex")}`;
    ctx = CTX;
    daemon = await startDaemon({ bin: args.moeserve, dir: args["model-dir"], name: model, timeoutS,
                                 extra: ["--api-key", apiKey, "--max-tokens", "32", "--ctx-size", String(CTX)],
                                 prefix: "ms-anthropic-" });
    baseURL = `http://127.0.0.1:${daemon.port}`;
    console.log(`anthropic-sdk: daemon on ${baseURL} (pid ${daemon.child.pid})`);
  }
  await run(cases, Anthropic, baseURL, model, apiKey, ctx);
} catch (e) {
  cases.fail("setup", e?.stack ?? e);
  daemon ??= e?.daemon ?? null;
}
await cases.finish(daemon);
