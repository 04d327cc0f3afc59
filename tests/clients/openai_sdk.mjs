// openai_sdk.mjs: client compatibility of `moeserve serve` with the official
// `openai` npm SDK (pinned in tests/clients/npm-sdk/package-lock.json).
//
//   tools/npm-ci.sh tests/clients/npm-sdk -- node tests/clients/openai_sdk.mjs --base-url http://127.0.0.1:PORT/v1 --model NAME [--api-key KEY]
//       against a daemon that is already running (NAME: its served model id)
//   tools/npm-ci.sh tests/clients/npm-sdk -- node tests/clients/openai_sdk.mjs --moeserve BIN --model-dir DIR [--timeout SECONDS]
//       starts BIN serve on a free loopback port with DIR (a chat-capable
//       checkpoint: tokenizer.json with the harmony tokens), runs the checks,
//       then stops it with SIGTERM (it must exit 0)
//
// The SDK's typed calls (completions and chat, streamed and not, streams with
// stream_options.include_usage, the chat stream helper that accumulates the
// deltas, models, the Responses API: create, stream, retrieve, delete, tools
// and previous_response_id; typed errors) must parse every response without error; the
// shapes are asserted: choices, finish_reason, usage and its
// prompt_tokens_details.cached_tokens.  Sampling is greedy (temperature 0),
// so a streamed request must give the text of the same request not streamed.
//
// The SDK comes from tests/clients/npm-sdk: the meson test runs this script through
// `tools/npm-ci.sh tests/clients/npm-sdk --`, which runs `npm ci` there when
// node_modules is not from the lockfile; if that fails, the test fails (it is
// not skipped).
//
// One line per case, then "openai-sdk: P passed, F failed"; exit status 0
// when F = 0, 1 otherwise, 2 on usage errors. The command line, the daemon
// and these lines are sdk_harness.mjs's, shared with anthropic_sdk.mjs.

import { Cases, assert, importSdk, parseArgs, startDaemon } from "./sdk_harness.mjs";

const { args, timeoutS } = parseArgs("openai_sdk.mjs");

// ---- assertions ----

function checkUsage(u, where, { maxCompletion } = {}) {
  assert(u && typeof u === "object", `${where}: no usage`);
  for (const f of ["prompt_tokens", "completion_tokens", "total_tokens"])
    assert(Number.isInteger(u[f]) && u[f] >= 0, `${where}: usage.${f} = ${JSON.stringify(u[f])}`);
  assert(u.prompt_tokens > 0, `${where}: usage.prompt_tokens is 0`);
  assert(u.total_tokens === u.prompt_tokens + u.completion_tokens, `${where}: total_tokens != prompt + completion`);
  if (maxCompletion !== undefined)
    assert(u.completion_tokens <= maxCompletion, `${where}: ${u.completion_tokens} completion tokens > max ${maxCompletion}`);
  const c = u.prompt_tokens_details?.cached_tokens;
  assert(Number.isInteger(c) && c >= 0 && c <= u.prompt_tokens,
         `${where}: usage.prompt_tokens_details.cached_tokens = ${JSON.stringify(c)}`);
}

const FINISH = ["stop", "length", "tool_calls"];

function checkHead(r, object, model, where) {
  assert(typeof r.id === "string" && r.id.length > 0, `${where}: id`);
  assert(r.object === object, `${where}: object ${JSON.stringify(r.object)}, want ${object}`);
  assert(Number.isInteger(r.created), `${where}: created`);
  assert(r.model === model, `${where}: model ${JSON.stringify(r.model)}, want ${model}`);
  assert(Array.isArray(r.choices), `${where}: choices is not a list`);
}

// ---- the cases ----

async function run(cases, OpenAI, baseURL, model, apiKey) {
  const client = new OpenAI({ baseURL, apiKey: apiKey ?? "unused", maxRetries: 0, timeout: timeoutS * 1000 });
  const test = (name, fn) => cases.test(name, fn);
  const prompt = "The quick brown fox";
  const messages = [
    { role: "system", content: "You are a terse assistant." },
    { role: "user", content: "Say hello in three words." },
  ];
  let cmplText = null, chatText = null;

  await test("models.list", async () => {
    const page = await client.models.list();
    const ids = page.data.map((m) => m.id);
    assert(ids.includes(model), `models.list: ${JSON.stringify(ids)} lacks ${model}`);
    const m = await client.models.retrieve(model);
    assert(m.id === model && m.object === "model", `models.retrieve: ${JSON.stringify(m)}`);
  });

  await test("completions.create (not streamed)", async () => {
    const r = await client.completions.create({ model, prompt, max_tokens: 8, temperature: 0 });
    checkHead(r, "text_completion", model, "completion");
    assert(r.choices.length === 1, `${r.choices.length} choices`);
    const c = r.choices[0];
    assert(c.index === 0 && typeof c.text === "string", `choice ${JSON.stringify(c)}`);
    assert(FINISH.includes(c.finish_reason), `finish_reason ${c.finish_reason}`);
    checkUsage(r.usage, "completion", { maxCompletion: 8 });
    cmplText = c.text;
  });

  await test("completions.create n=2, two prompts, logprobs, echo", async () => {
    const r = await client.completions.create({ model, prompt: ["Hello", "World wide"], n: 2, max_tokens: 3,
                                                temperature: 0, logprobs: 2, echo: true });
    checkHead(r, "text_completion", model, "completion");
    assert(r.choices.length === 4, `${r.choices.length} choices, want 4`);
    r.choices.forEach((c, i) => {
      assert(c.index === i, `choice ${i} has index ${c.index}`);
      const lp = c.logprobs;
      assert(lp && Array.isArray(lp.tokens) && lp.tokens.length === lp.token_logprobs.length &&
             lp.tokens.length === lp.top_logprobs.length && lp.tokens.length === lp.text_offset.length,
             `choice ${i}: logprobs arrays of unequal lengths`);
      assert(lp.token_logprobs[0] === null, `choice ${i}: the first prompt token has a logprob`);
      assert(c.text.startsWith(i < 2 ? "Hello" : "World wide"), `choice ${i}: echo missing: ${JSON.stringify(c.text)}`);
    });
    checkUsage(r.usage, "completion n=2");
  });

  await test("completions.create stream + include_usage", async () => {
    const stream = await client.completions.create({ model, prompt, max_tokens: 8, temperature: 0, stream: true,
                                                     stream_options: { include_usage: true } });
    let text = "", finish = null, usage = null, chunks = 0, afterUsage = 0;
    for await (const ch of stream) {
      chunks++;
      if (usage) afterUsage++;
      checkHead(ch, "text_completion", model, "completion chunk");
      if (ch.usage) {
        assert(ch.choices.length === 0, "the usage chunk has choices");
        usage = ch.usage;
        continue;
      }
      assert(ch.choices.length === 1, `chunk with ${ch.choices.length} choices`);
      text += ch.choices[0].text;
      if (ch.choices[0].finish_reason) {
        assert(finish === null, "two finish chunks");
        finish = ch.choices[0].finish_reason;
      }
    }
    assert(chunks >= 2, `${chunks} chunks`);
    assert(FINISH.includes(finish), `finish_reason ${finish}`);
    assert(afterUsage === 0, "chunks after the usage chunk");
    checkUsage(usage, "completion stream", { maxCompletion: 8 });
    if (cmplText !== null)
      assert(text === cmplText, `streamed text ${JSON.stringify(text)} != ${JSON.stringify(cmplText)}`);
  });

  await test("chat.completions.create (not streamed)", async () => {
    const r = await client.chat.completions.create({ model, messages, max_tokens: 8, temperature: 0 });
    checkHead(r, "chat.completion", model, "chat");
    assert(r.choices.length === 1, `${r.choices.length} choices`);
    const c = r.choices[0];
    assert(c.message.role === "assistant", `role ${c.message.role}`);
    assert(typeof c.message.content === "string" || (c.message.content === null && c.message.tool_calls?.length),
           `content ${JSON.stringify(c.message.content)}`);
    assert(FINISH.includes(c.finish_reason), `finish_reason ${c.finish_reason}`);
    checkUsage(r.usage, "chat", { maxCompletion: 8 });
    chatText = c.message.content ?? "";
  });

  await test("chat.completions.create stream + include_usage", async () => {
    const stream = await client.chat.completions.create({ model, messages, max_completion_tokens: 8, temperature: 0,
                                                          stream: true, stream_options: { include_usage: true } });
    let content = "", role = null, finish = null, usage = null, first = true;
    for await (const ch of stream) {
      checkHead(ch, "chat.completion.chunk", model, "chat chunk");
      if (ch.usage) {
        assert(ch.choices.length === 0, "the usage chunk has choices");
        usage = ch.usage;
        continue;
      }
      assert(!usage, "a chunk after the usage chunk");
      const d = ch.choices[0].delta;
      if (first) {
        assert(d.role === "assistant", `first delta ${JSON.stringify(d)}`);
        role = d.role;
        first = false;
      }
      content += d.content ?? "";
      if (ch.choices[0].finish_reason) finish = ch.choices[0].finish_reason;
    }
    assert(role === "assistant", "no role delta");
    assert(FINISH.includes(finish), `finish_reason ${finish}`);
    checkUsage(usage, "chat stream", { maxCompletion: 8 });
    if (chatText !== null)
      assert(content === chatText, `streamed content ${JSON.stringify(content)} != ${JSON.stringify(chatText)}`);
  });

  await test("chat.completions.stream helper (accumulated)", async () => {
    const runner = client.chat.completions.stream({ model, messages, max_tokens: 8, temperature: 0,
                                                    stream_options: { include_usage: true } });
    let deltas = 0;
    runner.on("content", () => { deltas++; });
    const final = await runner.finalChatCompletion();
    assert(final.choices.length === 1 && final.choices[0].message.role === "assistant",
           `final ${JSON.stringify(final.choices)}`);
    assert(FINISH.includes(final.choices[0].finish_reason), `finish_reason ${final.choices[0].finish_reason}`);
    checkUsage(final.usage, "chat stream helper", { maxCompletion: 8 });
    if (chatText !== null)
      assert((final.choices[0].message.content ?? "") === chatText, "accumulated content differs from the unstreamed one");
  });

  const tools = [{
    type: "function",
    function: {
      name: "get_weather",
      description: "Current weather in a city",
      parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
    },
  }];

  await test("chat with tools and reasoning_effort (not streamed)", async () => {
    const r = await client.chat.completions.create({
      model, max_tokens: 16, temperature: 0, tools, tool_choice: "auto", reasoning_effort: "low",
      messages: [{ role: "user", content: "Weather in Paris?" }],
    });
    checkHead(r, "chat.completion", model, "chat+tools");
    const c = r.choices[0];
    assert(c.message.role === "assistant" && FINISH.includes(c.finish_reason), `choice ${JSON.stringify(c)}`);
    for (const tc of c.message.tool_calls ?? [])
      assert(tc.type === "function" && typeof tc.function.name === "string" && typeof tc.function.arguments === "string",
             `tool call ${JSON.stringify(tc)}`);
    checkUsage(r.usage, "chat+tools", { maxCompletion: 16 });
  });

  await test("chat with tools, a tool-call round trip in the history (streamed)", async () => {
    const stream = await client.chat.completions.create({
      model, max_tokens: 8, temperature: 0, tools, stream: true, stream_options: { include_usage: true },
      messages: [
        { role: "user", content: "Weather in Paris?" },
        { role: "assistant", content: null,
          tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: "{\"city\":\"Paris\"}" } }] },
        { role: "tool", tool_call_id: "call_1", content: "{\"temp_c\": 21}" },
      ],
    });
    let finish = null, usage = null;
    for await (const ch of stream) {
      if (ch.usage) usage = ch.usage;
      for (const c of ch.choices) if (c.finish_reason) finish = c.finish_reason;
    }
    assert(FINISH.includes(finish), `finish_reason ${finish}`);
    checkUsage(usage, "chat+tool history stream", { maxCompletion: 8 });
  });

  // ---- the Responses API (client.responses) ----
  const rtools = [{ type: "function", name: "get_weather", description: "Current weather",
                    parameters: { type: "object", properties: { city: { type: "string" } } }, strict: false },
                  { type: "web_search" }];
  // raw: an event's response, without the SDK's output_text convenience
  function checkResponse(r, where, raw = false) {
    assert(r.object === "response" && r.id.startsWith("resp_"), `${where}: ${JSON.stringify(r).slice(0, 200)}`);
    assert(["completed", "incomplete"].includes(r.status), `${where}: status ${r.status}`);
    assert(raw || typeof r.output_text === "string", `${where}: output_text`);
    for (const it of r.output)
      assert(["message", "reasoning", "function_call"].includes(it.type), `${where}: item ${JSON.stringify(it)}`);
    const u = r.usage;
    assert(u && Number.isInteger(u.input_tokens) && Number.isInteger(u.output_tokens) &&
           u.total_tokens === u.input_tokens + u.output_tokens &&
           Number.isInteger(u.input_tokens_details?.cached_tokens) &&
           Number.isInteger(u.output_tokens_details?.reasoning_tokens), `${where}: usage ${JSON.stringify(u)}`);
  }
  let respId = null, respText = null;

  await test("responses.create (not streamed), responses.retrieve", async () => {
    const r = await client.responses.create({ model, input: "Say hello.", instructions: "Be terse.",
                                              max_output_tokens: 8, temperature: 0 });
    checkResponse(r, "responses.create");
    assert(r.instructions === "Be terse." && r.max_output_tokens === 8, `echo ${JSON.stringify(r)}`);
    const g = await client.responses.retrieve(r.id);
    assert(g.id === r.id && g.output_text === r.output_text, `retrieve ${JSON.stringify(g).slice(0, 200)}`);
    respId = r.id;
    respText = r.output_text;
  });

  await test("responses.stream iterated to the end, finalResponse", async () => {
    const stream = client.responses.stream({ model, input: "Say hello.", instructions: "Be terse.",
                                             max_output_tokens: 8, temperature: 0 });
    const types = [];
    let text = "";
    for await (const ev of stream) {
      types.push(ev.type);
      if (ev.type === "response.output_text.delta") text += ev.delta;
    }
    const r = await stream.finalResponse();
    checkResponse(r, "responses.stream");
    assert(types[0] === "response.created" && ["response.completed", "response.incomplete"].includes(types.at(-1)),
           `events ${types.join(",")}`);
    assert(text === r.output_text, `deltas ${JSON.stringify(text)} != output_text ${JSON.stringify(r.output_text)}`);
    assert(r.output_text === respText, "streamed and not streamed differ at temperature 0");
  });

  await test("responses: tools (function + web_search), previous_response_id, streamed", async () => {
    const stream = await client.responses.create({
      model, input: [{ role: "user", content: [{ type: "input_text", text: "Weather in Paris?" }] }],
      tools: rtools, tool_choice: "auto", reasoning: { effort: "low" }, max_output_tokens: 8,
      temperature: 0, previous_response_id: respId, stream: true });
    let last = null;
    for await (const ev of stream) last = ev;
    assert(["response.completed", "response.incomplete"].includes(last.type), `last event ${last.type}`);
    checkResponse(last.response, "tools stream", true);
    assert(last.response.previous_response_id === respId, "previous_response_id not echoed");
    const next = await client.responses.create({
      model, max_output_tokens: 4, temperature: 0, tools: rtools, input: [
        { type: "function_call", call_id: "call_1", name: "get_weather", arguments: "{\"city\":\"Paris\"}" },
        { type: "function_call_output", call_id: "call_1", output: "21 C" }],
      previous_response_id: last.response.id });
    checkResponse(next, "function_call_output turn");
    await client.responses.delete(next.id);
    try {
      await client.responses.retrieve(next.id);
      throw new Error("a deleted response was retrieved");
    } catch (e) {
      assert(e instanceof OpenAI.NotFoundError, `not a NotFoundError: ${e}`);
    }
  });

  await test("responses: background create, poll with retrieve, cancel, input_items", async () => {
    const r = await client.responses.create({ model, input: "Say hello.", background: true,
                                              max_output_tokens: 64, temperature: 0, store: false });
    assert(r.background === true && ["queued", "in_progress"].includes(r.status),
           `background create: ${r.status}`);
    let g = r;
    for (let i = 0; i < 600 && ["queued", "in_progress"].includes(g.status); i++) {
      await new Promise((res) => setTimeout(res, 50));
      g = await client.responses.retrieve(r.id);
    }
    checkResponse(g, "background, polled to the end");
    const items = await client.responses.inputItems.list(r.id);
    assert(items.data.length === 1 && items.data[0].role === "user", `input_items ${JSON.stringify(items.data)}`);
    // a long one, cancelled while it runs
    const long = await client.responses.create({ model, input: "Tell a long story.", background: true,
                                                 max_output_tokens: 20000 });
    await new Promise((res) => setTimeout(res, 100));
    const c = await client.responses.cancel(long.id);
    assert(c.status === "cancelled", `cancel: ${c.status}`);
    const after = await client.responses.retrieve(long.id);
    assert(after.status === "cancelled" && after.usage.output_tokens < 20000,
           `after cancel: ${after.status} ${JSON.stringify(after.usage)}`);
    // not a background one: cancelling it is a 400
    try {
      await client.responses.cancel(respId);
      throw new Error("a foreground response was cancelled");
    } catch (e) {
      assert(e instanceof OpenAI.BadRequestError, `not a BadRequestError: ${e}`);
    }
  });

  await test("typed errors: BadRequestError (400), NotFoundError (404)", async () => {
    try {
      await client.completions.create({ model, prompt, max_tokens: -1 });
      throw new Error("max_tokens -1 was accepted");
    } catch (e) {
      assert(e instanceof OpenAI.BadRequestError, `not a BadRequestError: ${e}`);
      assert(e.status === 400 && typeof e.error?.message === "string" && e.error.type === "invalid_request_error" &&
             e.param === "max_tokens", `400 error ${JSON.stringify(e.error)} param ${e.param}`);
    }
    try {
      await client.chat.completions.create({ model: "no-such-model", messages, max_tokens: 2 });
      throw new Error("an unknown model was accepted");
    } catch (e) {
      assert(e instanceof OpenAI.NotFoundError, `not a NotFoundError: ${e}`);
      assert(e.status === 404 && /no-such-model/.test(e.error?.message ?? ""), `404 error ${JSON.stringify(e.error)}`);
    }
  });
}

// ---- main ----

const { default: OpenAI } = await importSdk("openai-sdk", "npm-sdk", "openai");

const cases = new Cases("openai-sdk");
let daemon = null, baseURL = args["base-url"], model = args.model;
try {
  if (args.moeserve) {
    model = "moeserve-sdk-test";
    daemon = await startDaemon({ bin: args.moeserve, dir: args["model-dir"], name: model, prefix: "ms-sdk-", timeoutS });
    baseURL = `http://127.0.0.1:${daemon.port}/v1`;
    console.log(`openai-sdk: daemon on ${baseURL} (pid ${daemon.child.pid})`);
  }
  await run(cases, OpenAI, baseURL, model, args["api-key"]);
} catch (e) {
  cases.fail("setup", e?.stack ?? e);
  daemon ??= e?.daemon ?? null;
}
await cases.finish(daemon);
