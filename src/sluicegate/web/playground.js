// Sluicegate playground: one page, no dependencies, no build step.
// Each dialect has a request builder and an event handler; both feed the same Turn view.
"use strict";

const $ = (id) => document.getElementById(id);
const KEY_STORAGE = "sluicegate.apiKey";
const PREFS = "sluicegate.playground";

const state = {
  history: [], // [{role: "user"|"assistant", content}] for dialects that resend the conversation
  lmstudioPrevious: null, // LM Studio keeps the conversation server-side: previous_response_id
  controller: null,
  image: null, // the attached image: {url (a data URL), type, name}, sent with the next message
};

// --- HTTP ------------------------------------------------------------------------------------

function headers(json = true) {
  const h = {};
  if (json) h["Content-Type"] = "application/json";
  const key = $("api-key").value.trim();
  if (key) h["Authorization"] = "Bearer " + key;
  return h;
}

async function errorText(response) {
  const text = await response.text();
  try {
    const body = JSON.parse(text);
    const err = body.error || body;
    return `${response.status}: ${err.message || text}`;
  } catch (_) {
    return `${response.status}: ${text}`;
  }
}

// Reads a text/event-stream body and calls onEvent(name, data) per event, as it arrives.
async function readSSE(response, onEvent) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true }).replace(/\r\n?/g, "\n");
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      let name = null;
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith(":")) continue; // heartbeat comments
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let val = colon < 0 ? "" : line.slice(colon + 1);
        if (val.startsWith(" ")) val = val.slice(1);
        if (field === "event") name = val;
        else if (field === "data") data.push(val);
      }
      if (data.length) onEvent(name, data.join("\n"));
    }
  }
}

// --- models ----------------------------------------------------------------------------------

async function loadModels() {
  const select = $("model");
  const previous = select.value || localPrefs().model;
  const ids = new Map(); // id -> label
  const sources = [
    ["/v1/models", (b) => (b.data || []).map((m) => [m.id, m.id])],
    ["/api/v1/models", (b) => (b.models || []).map((m) => [m.key, m.display_name || m.key])],
  ];
  const problems = [];
  await Promise.all(sources.map(async ([path, pick]) => {
    try {
      const response = await fetch(path, { headers: headers(false) });
      if (!response.ok) { problems.push(`${path} → ${await errorText(response)}`); return; }
      for (const [id, label] of pick(await response.json())) if (id && !ids.has(id)) ids.set(id, label);
    } catch (e) {
      problems.push(`${path} → ${e}`);
    }
  }));
  select.replaceChildren(...[...ids].map(([id, label]) => {
    const option = document.createElement("option");
    option.value = id;
    option.textContent = label === id ? id : `${label} (${id})`;
    return option;
  }));
  if (previous && ids.has(previous)) select.value = previous;
  setStatus(ids.size ? "" : problems.join("\n") || "No models.");
}

// --- the view of one assistant turn ----------------------------------------------------------

class Turn {
  constructor(model) {
    this.el = $("turn-template").content.firstElementChild.cloneNode(true);
    this.el.dataset.model = model;
    this.blocks = this.el.querySelector(".blocks");
    this.log = this.el.querySelector(".log");
    this.current = null; // {kind, el, body}
    this.tools = new Map(); // key -> tool view
    this.text = "";
    this.started = performance.now();
    this.firstToken = null;
    this.tokens = 0; // deltas seen: the fallback count for tokens/s
    $("conversation").append(this.el);
  }

  raw(name, data) {
    this.log.textContent += (name ? `event: ${name}\n` : "") + `data: ${data}\n\n`;
  }

  progress(which, value, done) {
    const bar = this.el.querySelector(".progress." + which);
    bar.hidden = false;
    if (value != null) {
      bar.querySelector("progress").value = value;
      bar.querySelector(".pct").textContent = Math.round(value * 100) + "%";
    }
    if (done) {
      bar.querySelector("progress").value = 1;
      bar.querySelector(".pct").textContent = "100%";
      bar.classList.add("done");
    }
  }

  tick() {
    this.tokens += 1;
    if (this.firstToken == null) this.firstToken = performance.now();
  }

  block(kind) {
    if (this.current && this.current.kind === kind) return this.current;
    let el, body;
    if (kind === "reasoning") {
      el = document.createElement("details");
      el.className = "reasoning";
      el.innerHTML = "<summary>Reasoning</summary>";
      body = document.createElement("div");
      body.className = "body";
      el.append(body);
    } else {
      el = body = document.createElement("div");
      el.className = kind === "refusal" ? "text error" : "text";
    }
    this.blocks.append(el);
    this.current = { kind, el, body };
    return this.current;
  }

  reasoning(text) { this.tick(); this.block("reasoning").body.textContent += text; this.scroll(); }

  message(text) {
    this.tick();
    this.block("text").body.textContent += text;
    this.text += text;
    this.scroll();
  }

  refusal(text) { this.tick(); this.block("refusal").body.textContent += text; }

  // A tool call: `where` says who runs it (a server-side provider) or that the client must.
  tool(key, name, where) {
    let view = this.tools.get(key);
    if (!view) {
      const el = document.createElement("div");
      el.className = "tool";
      el.innerHTML = '<div class="head"></div><pre class="args"></pre>';
      el.querySelector(".head").textContent = name || "tool";
      if (where) {
        const span = document.createElement("span");
        span.className = "where";
        span.textContent = " · " + where;
        el.querySelector(".head").append(span);
      }
      this.blocks.append(el);
      view = { el, args: el.querySelector(".args"), name };
      this.tools.set(key, view);
      this.current = null;
      this.tick();
    } else if (name && !view.name) {
      view.name = name;
      view.el.querySelector(".head").firstChild.textContent = name;
    }
    this.scroll();
    return view;
  }

  toolArgs(key, delta, replace = false) {
    const view = this.tool(key);
    if (replace) view.args.textContent = typeof delta === "string" ? delta : JSON.stringify(delta);
    else view.args.textContent += delta;
  }

  toolResult(key, output, failed) {
    const view = this.tool(key);
    const pre = document.createElement("pre");
    pre.className = "result";
    pre.textContent = typeof output === "string" ? output : JSON.stringify(output, null, 1);
    view.el.append(pre);
    view.el.classList.add(failed ? "failed" : "ok");
    this.current = null;
    this.scroll();
  }

  error(message) {
    const el = document.createElement("div");
    el.className = "error";
    el.textContent = "Error: " + message;
    this.blocks.append(el);
    this.current = null;
  }

  // Usage at the end: the dialect's counts when it sent them, else the deltas counted here.
  finish({ input, output, tps, ttft, note } = {}) {
    const end = performance.now();
    const first = this.firstToken ?? end;
    const out = output ?? this.tokens;
    const rate = tps ?? (end > first && out > 1 ? (out - 1) / ((end - first) / 1000) : null);
    const parts = [];
    if (input != null) parts.push(`${input} in`);
    parts.push(`${out} out`);
    if (rate != null) parts.push(`${rate.toFixed(1)} tokens/s`);
    parts.push(`first token ${((ttft ?? (first - this.started) / 1000)).toFixed(2)} s`);
    parts.push(`total ${((end - this.started) / 1000).toFixed(2)} s`);
    if (note) parts.push(note);
    this.el.querySelector(".stats").textContent = parts.join(" · ");
    this.el.classList.add("finished");
  }

  scroll() { window.scrollTo(0, document.body.scrollHeight); }
}

// --- dialects: request bodies and stream handlers --------------------------------------------

function conversation(system, content) {
  return [...(system ? [{ role: "system", content: system }] : []), ...state.history,
    { role: "user", content }];
}

function providerName(info) {
  if (!info) return "";
  return "runs on the server: " + (info.plugin_id || info.server_label || info.type || "");
}

const DIALECTS = {
  chat: {
    path: "/v1/chat/completions",
    // A user message's content: the text, and the attached image in this dialect's shape.
    content: (text, image) => image
      ? [{ type: "text", text }, { type: "image_url", image_url: { url: image.url } }] : text,
    body: (model, system, content) => ({
      model, stream: true, stream_options: { include_usage: true }, messages: conversation(system, content),
    }),
    handler(turn) {
      let usage = null;
      return {
        event(name, data) {
          const chunk = JSON.parse(data);
          if (chunk.error) { turn.error(chunk.error.message || data); return; }
          if (chunk.usage) usage = chunk.usage;
          for (const choice of chunk.choices || []) {
            const d = choice.delta || {};
            const thought = d.reasoning_content ?? d.reasoning;
            if (thought) turn.reasoning(thought);
            if (d.content) turn.message(d.content);
            if (d.refusal) turn.refusal(d.refusal);
            for (const call of d.tool_calls || []) {
              const fn = call.function || {};
              turn.tool("i" + call.index, fn.name, fn.name ? "for the client" : "");
              if (fn.arguments) turn.toolArgs("i" + call.index, fn.arguments);
            }
          }
        },
        end() {
          turn.finish(usage ? { input: usage.prompt_tokens, output: usage.completion_tokens } : {});
        },
      };
    },
  },

  responses: {
    path: "/v1/responses",
    content: (text, image) => image
      ? [{ type: "input_text", text }, { type: "input_image", image_url: image.url, detail: "auto" }] : text,
    body: (model, system, content) => ({
      model, stream: true, store: false, ...(system ? { instructions: system } : {}),
      input: [...state.history, { role: "user", content }],
    }),
    handler(turn) {
      let usage = null;
      const key = (e) => "o" + e.output_index;
      return {
        event(name, data) {
          const e = JSON.parse(data);
          const type = e.type || name;
          const item = e.item || {};
          if (type === "response.output_item.added") {
            if (item.type === "function_call") turn.tool(key(e), item.name, "for the client");
            else if (item.type === "mcp_call") turn.tool(key(e), item.name, "runs on the server: " + item.server_label);
          } else if (type === "response.output_text.delta") turn.message(e.delta);
          else if (type === "response.refusal.delta") turn.refusal(e.delta);
          else if (type.includes("reasoning") && type.endsWith(".delta")) turn.reasoning(e.delta);
          else if (type === "response.function_call_arguments.delta" || type === "response.mcp_call_arguments.delta") {
            turn.toolArgs(key(e), e.delta);
          } else if (type === "response.output_item.done" && item.type === "mcp_call") {
            turn.toolArgs(key(e), item.arguments, true);
            turn.toolResult(key(e), item.error || item.output || "", !!item.error);
          } else if (type === "response.completed" || type === "response.incomplete") {
            usage = e.response && e.response.usage;
          } else if (type === "response.failed") {
            const err = e.response && e.response.error;
            turn.error(err ? err.message : "the response failed");
          } else if (type === "error") {
            turn.error(e.message || (e.error && e.error.message) || data);
          }
        },
        end() {
          turn.finish(usage ? { input: usage.input_tokens, output: usage.output_tokens } : {});
        },
      };
    },
  },

  lmstudio: {
    path: "/api/v1/chat",
    content: (text, image) => image
      ? [{ type: "text", content: text }, { type: "image", data_url: image.url }] : text,
    body: (model, system, content) => {
      const integrations = $("integrations").value.split(",").map((s) => s.trim()).filter(Boolean);
      return {
        model, stream: true, input: content,
        ...(system ? { system_prompt: system } : {}),
        ...(state.lmstudioPrevious ? { previous_response_id: state.lmstudioPrevious } : {}),
        ...(integrations.length ? { integrations } : {}),
      };
    },
    handler(turn) {
      let stats = null;
      let calls = 0;
      const key = () => "c" + calls;
      return {
        event(name, data) {
          const e = JSON.parse(data);
          switch (e.type || name) {
            case "model_load.start": turn.progress("load", 0); break;
            case "model_load.progress": turn.progress("load", e.progress); break;
            case "model_load.end": turn.progress("load", null, true); break;
            case "prompt_processing.start": turn.progress("prompt", 0); break;
            case "prompt_processing.progress": turn.progress("prompt", e.progress); break;
            case "prompt_processing.end": turn.progress("prompt", null, true); break;
            case "reasoning.delta": turn.reasoning(e.content); break;
            case "message.delta": turn.message(e.content); break;
            case "tool_call.start": calls += 1; turn.tool(key(), e.tool, providerName(e.provider_info)); break;
            case "tool_call.arguments": turn.toolArgs(key(), e.arguments, true); break;
            case "tool_call.success": turn.toolResult(key(), e.output, false); break;
            case "tool_call.failure": turn.toolResult(key(), e.reason, true); break;
            case "tool_call.result": turn.toolResult(key(), e.output ?? e.error, !!e.error); break;
            case "error": turn.error((e.error && e.error.message) || data); break;
            case "chat.end":
              stats = e.result && e.result.stats;
              state.lmstudioPrevious = (e.result && e.result.response_id) || state.lmstudioPrevious;
              break;
          }
        },
        end() {
          turn.finish(stats ? {
            input: stats.input_tokens, output: stats.total_output_tokens,
            tps: stats.tokens_per_second, ttft: stats.time_to_first_token_seconds,
          } : {});
        },
      };
    },
  },

  anthropic: {
    path: "/v1/messages",
    content: (text, image) => image
      ? [{ type: "image", source: { type: "base64", media_type: image.type, data: image.url.split(",", 2)[1] } },
        { type: "text", text }]
      : text,
    body: (model, system, content) => ({
      model, stream: true, max_tokens: 4096, ...(system ? { system } : {}),
      messages: [...state.history, { role: "user", content }],
    }),
    extraHeaders: { "anthropic-version": "2023-06-01" },
    handler(turn) {
      let input = null, output = null;
      const calls = new Map(); // tool_use id -> the view's key, for the results that follow
      return {
        event(name, data) {
          const e = JSON.parse(data);
          const key = "b" + e.index;
          switch (e.type || name) {
            case "message_start": input = e.message && e.message.usage && e.message.usage.input_tokens; break;
            case "content_block_start": {
              const block = e.content_block || {};
              if (block.id) calls.set(block.id, key);
              if (block.type === "tool_use") turn.tool(key, block.name, "for the client");
              else if (block.type === "server_tool_use" || block.type === "mcp_tool_use") {
                turn.tool(key, block.name, "runs on the server" + (block.server_name ? ": " + block.server_name : ""));
              } else if (block.type && block.type.endsWith("tool_result")) {
                const target = calls.get(block.tool_use_id) || key;
                const content = Array.isArray(block.content)
                  ? block.content.map((c) => c.text ?? JSON.stringify(c)).join("") : block.content;
                turn.toolResult(target, content ?? "", !!block.is_error);
              }
              break;
            }
            case "content_block_delta": {
              const d = e.delta || {};
              if (d.type === "text_delta") turn.message(d.text);
              else if (d.type === "thinking_delta") turn.reasoning(d.thinking);
              else if (d.type === "input_json_delta") turn.toolArgs(key, d.partial_json);
              break;
            }
            case "message_delta": // the final counts (input too, after server-side tool rounds)
              if (e.usage) {
                output = e.usage.output_tokens ?? output;
                input = e.usage.input_tokens ?? input;
              }
              break;
            case "error": turn.error((e.error && e.error.message) || data); break;
          }
        },
        end() { turn.finish({ input: input ?? undefined, output: output ?? undefined }); },
      };
    },
  },
};

// --- sending ---------------------------------------------------------------------------------

function setStatus(text) { $("status").textContent = text; }

function userTurn(text, image) {
  const el = document.createElement("article");
  el.className = "turn user";
  el.textContent = text;
  if (image) {
    const img = document.createElement("img");
    img.className = "attachment";
    img.src = image.url;
    img.alt = image.name;
    el.append(img);
  }
  $("conversation").append(el);
}

function attach(file) {
  if (!file) { state.image = null; $("attached").textContent = ""; return; }
  const reader = new FileReader();
  reader.onload = () => {
    state.image = { url: reader.result, type: file.type || "image/png", name: file.name };
    $("attached").textContent = file.name;
  };
  reader.readAsDataURL(file);
}

async function send(text) {
  const dialect = DIALECTS[$("dialect").value];
  const model = $("model").value;
  if (!model) { setStatus("Pick a model first."); return; }
  setStatus("");
  const image = state.image;
  const content = dialect.content(text, image);
  userTurn(text, image);
  $("image").value = "";
  attach(null);
  const turn = new Turn(model);
  const controller = new AbortController();
  state.controller = controller;
  busy(true);
  try {
    const response = await fetch(dialect.path, {
      method: "POST",
      headers: { ...headers(), ...(dialect.extraHeaders || {}) },
      body: JSON.stringify(dialect.body(model, $("system").value.trim(), content)),
      signal: controller.signal,
    });
    if (!response.ok) { turn.error(await errorText(response)); turn.finish({ note: "failed" }); return; }
    const handler = dialect.handler(turn);
    await readSSE(response, (name, data) => {
      turn.raw(name, data);
      if (data === "[DONE]") return; // the OpenAI dialects' end marker
      try { handler.event(name, data); } catch (e) { turn.error(`could not read an event: ${e}`); }
    });
    handler.end();
    if (turn.text) state.history.push({ role: "user", content }, { role: "assistant", content: turn.text });
  } catch (e) {
    if (e.name === "AbortError") turn.finish({ note: "stopped" });
    else { turn.error(String(e)); turn.finish({ note: "failed" }); }
  } finally {
    state.controller = null;
    busy(false);
  }
}

function busy(on) {
  $("send").disabled = on;
  $("stop").disabled = !on;
}

// --- preferences and wiring ------------------------------------------------------------------

function localPrefs() {
  try { return JSON.parse(localStorage.getItem(PREFS) || "{}"); } catch (_) { return {}; }
}

function savePrefs() {
  localStorage.setItem(PREFS, JSON.stringify({
    dialect: $("dialect").value, model: $("model").value, integrations: $("integrations").value,
  }));
}

function newChat() {
  state.history = [];
  state.lmstudioPrevious = null;
  $("conversation").replaceChildren();
}

function showDialect() {
  document.body.classList.toggle("lmstudio", $("dialect").value === "lmstudio");
}

document.addEventListener("DOMContentLoaded", () => {
  const prefs = localPrefs();
  $("api-key").value = localStorage.getItem(KEY_STORAGE) || "";
  if (prefs.dialect) $("dialect").value = prefs.dialect;
  if (prefs.integrations) $("integrations").value = prefs.integrations;
  showDialect();
  $("api-key").addEventListener("change", () => {
    localStorage.setItem(KEY_STORAGE, $("api-key").value.trim());
    loadModels();
  });
  $("dialect").addEventListener("change", () => { showDialect(); savePrefs(); newChat(); });
  $("model").addEventListener("change", savePrefs);
  $("integrations").addEventListener("change", savePrefs);
  $("reload-models").addEventListener("click", loadModels);
  $("stop").addEventListener("click", () => state.controller && state.controller.abort());
  $("clear").addEventListener("click", newChat);
  $("image").addEventListener("change", () => attach($("image").files[0]));
  $("composer").addEventListener("submit", (event) => {
    event.preventDefault();
    const text = $("prompt").value.trim();
    if (!text || state.controller) return;
    $("prompt").value = "";
    send(text);
  });
  $("prompt").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      $("composer").requestSubmit();
    }
  });
  loadModels();
});
