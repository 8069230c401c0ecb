// The `ollama` npm library, unchanged, against a Sluicegate server: every call the Python
// test makes with the Python library. Prints one JSON object of what it saw; the test asserts.
// Usage: OLLAMA_JS=<folder with node_modules/ollama> node ollama_js_check.cjs <host> <pull-name>
const path = require("node:path");
const { Ollama } = require(path.join(process.env.OLLAMA_JS, "node_modules", "ollama"));

async function main() {
  const [host, pullName] = process.argv.slice(2);
  const ollama = new Ollama({ host });
  const out = {};
  out.list = (await ollama.list()).models.map((m) => m.model);
  const shown = await ollama.show({ model: "tiny" });
  out.show = { capabilities: shown.capabilities, arch: shown.model_info["general.architecture"] };
  const ask = [{ role: "user", content: "Hi" }];
  out.chat = (await ollama.chat({ model: "chat", messages: ask })).message.content;
  let streamed = "";
  let last = null;
  for await (const part of await ollama.chat({ model: "chat:latest", messages: ask, stream: true })) {
    streamed += part.message.content;
    last = part;
  }
  out.chatStream = { text: streamed, done: last.done, reason: last.done_reason, evalCount: last.eval_count };
  const tool = {
    type: "function",
    function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } } } },
  };
  const messages = [{ role: "user", content: "weather in Paris?" }];
  const first = await ollama.chat({ model: "chat", messages, tools: [tool] });
  out.toolCall = first.message.tool_calls[0].function;
  messages.push(first.message, { role: "tool", content: "sunny", tool_name: "get_weather" });
  out.toolAnswer = (await ollama.chat({ model: "chat", messages, tools: [tool] })).message.content;
  const thought = await ollama.chat({ model: "chat", messages: [{ role: "user", content: "think" }], think: true });
  out.thinking = thought.message.thinking;
  const schema = {
    type: "object",
    properties: { ok: { type: "boolean" } },
    required: ["ok"],
    additionalProperties: false,
  };
  const formatted = await ollama.chat({
    model: "tiny",
    messages: ask,
    format: schema,
    options: { num_predict: 100, seed: 2 },
  });
  out.format = JSON.parse(formatted.message.content);
  out.generate = (await ollama.generate({ model: "chat", prompt: "Hi" })).response;
  out.embed = (await ollama.embed({ model: "tiny-embed", input: ["a", "b"] })).embeddings.map((e) => e.length);
  const progress = [];
  for await (const p of await ollama.pull({ model: pullName, stream: true })) progress.push(p);
  out.pull = { first: progress[0].status, last: progress.at(-1).status, sized: progress.some((p) => p.total > 0) };
  out.load = (await ollama.generate({ model: "tiny", prompt: "" })).done_reason;
  out.psLoaded = (await ollama.ps()).models.map((m) => m.model);
  out.unload = (await ollama.chat({ model: "tiny", messages: [], keep_alive: 0 })).done_reason;
  out.psAfter = (await ollama.ps()).models.map((m) => m.model);
  try {
    await ollama.chat({ model: "nope:7b", messages: ask });
    out.unknown = "no error";
  } catch (error) {
    out.unknown = { name: error.name, status: error.status_code, error: error.error };
  }
  console.log(JSON.stringify(out));
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
