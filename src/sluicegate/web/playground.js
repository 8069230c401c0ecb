// Sluicegate playground: one page, no dependencies, no build step.
// Conversations are kept in the browser (localStorage) in a dialect-neutral form — user turns
// with their text and images, assistant turns as the blocks they showed — and each request is
// built from that form in the chosen dialect's shape, so switching dialects keeps the
// conversation. Each dialect has a request builder and an event handler; both feed the same
// Turn view, which renders assistant text as Markdown (markdown.js) as it streams.
"use strict";

const $ = (id) => document.getElementById(id);
const KEY_STORAGE = "sluicegate.apiKey";
const PREFS = "sluicegate.playground";
const CHATS = "sluicegate.conversations";

const state = {
  chats: [], // [{id, title, updated, messages: [user | assistant message]}], newest first
  current: null, // the id of the conversation on screen
  attachments: [], // data: URLs of the images waiting to go with the next message
  reasoningOptions: new Map(), // model -> LM Studio's allowed reasoning settings for it
  controller: null,
};

// --- conversations kept in the browser -----------------------------------------------------------
// A user message: {role: "user", text, images: [data URL]}. An assistant message: {role:
// "assistant", model, dialect, blocks: [{kind: "reasoning"|"text"|"refusal"|"error", text} |
// {kind: "tool", name, where, args, result, failed}], stats, responseId (LM Studio's)}.

function loadChats() {
  try {
    const saved = JSON.parse(localStorage.getItem(CHATS) || "{}");
    state.chats = Array.isArray(saved.chats) ? saved.chats : [];
    state.current = saved.current || null;
  } catch (_) {
    state.chats = [];
  }
}

function saveChats() {
  const data = { current: state.current, chats: state.chats.filter((c) => c.messages.length) };
  try {
    localStorage.setItem(CHATS, JSON.stringify(data));
  } catch (_) {
    // Over the quota (images are large): keep the text, drop the pictures from storage.
    const slim = JSON.parse(JSON.stringify(data));
    for (const chat of slim.chats) {
      for (const m of chat.messages) if (m.images && m.images.length) { m.dropped = m.images.length; m.images = []; }
    }
    try { localStorage.setItem(CHATS, JSON.stringify(slim)); } catch (_) { setStatus("The browser's storage is full: this conversation is not saved."); }
  }
}

function currentChat() {
  let chat = state.chats.find((c) => c.id === state.current);
  if (!chat) {
    chat = { id: "c" + Date.now().toString(36) + Math.random().toString(36).slice(2, 6), title: "", updated: Date.now(), messages: [] };
    state.chats.unshift(chat);
    state.current = chat.id;
  }
  return chat;
}

function assistantText(message) {
  return (message.blocks || []).filter((b) => b.kind === "text").map((b) => b.text).join("");
}

// The finished exchanges before the new message: a user turn with the answer it got. Turns that
// failed or were stopped before any text are left out, so every dialect gets alternating roles.
function priorTurns(messages) {
  const out = [];
  for (let i = 0; i < messages.length; i += 1) {
    const m = messages[i];
    const answer = messages[i + 1];
    if (m.role === "user" && answer && answer.role === "assistant" && assistantText(answer)) {
      out.push(m, answer);
      i += 1;
    }
  }
  return out;
}

// --- HTTP ------------------------------------------------------------------------------------

function headers(json = true) {
  const h = {};
  if (json) h["Content-Type"] = "application/json";
  const key = $("api-key").value.trim();
  if (key) h["Authorization"] = "Bearer " + key;
  return h;
}

async function errorText(response, text = null) {
  text = text ?? await response.text();
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
    ["/api/v1/models", (b) => (b.models || []).map((m) => {
      const options = m.capabilities && m.capabilities.reasoning && m.capabilities.reasoning.allowed_options;
      if (Array.isArray(options)) state.reasoningOptions.set(m.key, options);
      return [m.key, m.display_name || m.key];
    })],
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

// --- copying ---------------------------------------------------------------------------------

async function copyText(text, target) {
  let ok = false;
  try {
    await navigator.clipboard.writeText(text);
    ok = true;
  } catch (_) { // not a secure context (a LAN address): the older way
    const area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.style.position = "fixed";
    area.style.opacity = "0";
    document.body.append(area);
    area.select();
    try { ok = document.execCommand("copy"); } catch (_) { ok = false; }
    area.remove();
  }
  const label = target.textContent;
  target.textContent = ok ? "Copied" : "Copy failed";
  setTimeout(() => { target.textContent = label === "Copied" || label === "Copy failed" ? "Copy" : label; }, 1500);
}

function copyButton(label) {
  return button("copy copy-message", "Copy", label, () => {}); // the click is handled below
}

// --- the view of one turn --------------------------------------------------------------------

function userTurn(message) {
  const el = document.createElement("article");
  el.className = "turn user";
  const head = document.createElement("div");
  head.className = "head";
  head.innerHTML = '<span class="who">You</span>';
  head.append(copyButton("Copy message"));
  const body = document.createElement("div");
  body.className = "body";
  body.textContent = message.text;
  el.append(head, body);
  if (message.images && message.images.length) {
    const images = document.createElement("div");
    images.className = "images";
    for (const url of message.images) {
      const img = document.createElement("img");
      img.src = url;
      img.alt = "attached image";
      images.append(img);
    }
    el.append(images);
  }
  if (message.dropped) {
    const note = document.createElement("div");
    note.className = "note";
    note.textContent = `${message.dropped} image(s) not kept: the browser's storage was full`;
    el.append(note);
  }
  el.copySource = () => message.text;
  $("conversation").append(el);
  return el;
}

class Turn {
  // `message` is the assistant message this view fills (and, for a stored one, replays).
  constructor(message) {
    this.msg = message;
    this.el = $("turn-template").content.firstElementChild.cloneNode(true);
    this.el.querySelector(".who").textContent = message.model + (message.dialect ? ` · ${DIALECTS[message.dialect]?.label || message.dialect}` : "");
    this.el.querySelector(".head").append(copyButton("Copy answer"));
    if (typeof playButton === "function") this.el.querySelector(".head").append(playButton(() => assistantText(this.msg))); // voice.js
    this.el.copySource = () => assistantText(this.msg);
    this.blocks = this.el.querySelector(".blocks");
    this.log = this.el.querySelector(".log");
    this.current = null; // {kind, el, body, rec}
    this.tools = new Map(); // key -> tool view
    this.started = performance.now();
    this.firstToken = null;
    this.tokens = 0; // deltas seen: the fallback count for tokens/s
    this.pending = null; // a text block waiting to be re-rendered
    $("conversation").append(this.el);
  }

  // A stored turn, shown again as it was.
  static replay(message) {
    const turn = new Turn({ ...message, blocks: [] });
    turn.msg = message;
    const blocks = message.blocks || [];
    message.blocks = [];
    blocks.forEach((b, n) => {
      if (b.kind === "tool") {
        turn.tool("r" + n, b.name, b.where);
        turn.toolArgs("r" + n, b.args || "", true);
        if (b.result != null) turn.toolResult("r" + n, b.result, b.failed);
      } else if (b.kind === "error") turn.error(b.text);
      else turn.add(b.kind, b.text);
    });
    turn.flush();
    turn.el.querySelector(".stats").textContent = message.stats || "";
    turn.el.querySelector("details.raw").hidden = true; // the raw events are not kept
    turn.el.classList.add("finished");
    return turn;
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
      el.className = kind === "refusal" ? "text error" : "text md";
    }
    this.blocks.append(el);
    const rec = { kind, text: "" };
    this.msg.blocks.push(rec);
    this.current = { kind, el, body, rec };
    return this.current;
  }

  // Text of a kind; assistant text is Markdown, re-rendered once per frame while it streams.
  add(kind, text) {
    const cur = this.block(kind);
    cur.rec.text += text;
    if (kind === "text") {
      if (this.pending && this.pending !== cur) this.flush();
      if (!this.pending) {
        this.pending = cur;
        requestAnimationFrame(() => this.flush());
      }
    } else cur.body.textContent += text;
  }

  flush() {
    if (!this.pending) return;
    const cur = this.pending;
    this.pending = null;
    Markdown.render(cur.body, cur.rec.text);
    this.scroll();
  }

  reasoning(text) { this.tick(); this.add("reasoning", text); this.scroll(); }

  message(text) { this.tick(); this.add("text", text); }

  refusal(text) { this.tick(); this.add("refusal", text); }

  // A tool call: `where` says who runs it (a server-side provider) or that the client must.
  tool(key, name, where) {
    let view = this.tools.get(key);
    if (!view) {
      this.flush();
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
      const rec = { kind: "tool", name: name || "", where: where || "", args: "", result: null, failed: false };
      this.msg.blocks.push(rec);
      view = { el, args: el.querySelector(".args"), name, rec };
      this.tools.set(key, view);
      this.current = null;
      this.tick();
    } else if (name && !view.name) {
      view.name = view.rec.name = name;
      view.el.querySelector(".head").firstChild.textContent = name;
    }
    this.scroll();
    return view;
  }

  toolArgs(key, delta, replace = false) {
    const view = this.tool(key);
    if (replace) view.args.textContent = typeof delta === "string" ? delta : JSON.stringify(delta);
    else view.args.textContent += delta;
    view.rec.args = view.args.textContent;
  }

  toolResult(key, output, failed) {
    const view = this.tool(key);
    const pre = document.createElement("pre");
    pre.className = "result";
    pre.textContent = typeof output === "string" ? output : JSON.stringify(output, null, 1);
    view.el.append(pre);
    view.el.classList.add(failed ? "failed" : "ok");
    view.rec.result = pre.textContent;
    view.rec.failed = !!failed;
    this.current = null;
    this.scroll();
  }

  error(message) {
    this.flush();
    const el = document.createElement("div");
    el.className = "error";
    el.setAttribute("role", "alert");
    el.textContent = "Error: " + message;
    this.blocks.append(el);
    this.msg.blocks.push({ kind: "error", text: message });
    this.current = null;
    this.scroll();
  }

  // Usage at the end: the dialect's counts when it sent them, else the deltas counted here.
  finish({ input, output, tps, ttft, note } = {}) {
    this.flush();
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
    this.msg.stats = parts.join(" · ");
    this.el.querySelector(".stats").textContent = this.msg.stats;
    this.el.classList.add("finished");
    this.scroll();
  }

  scroll() { window.scrollTo(0, document.body.scrollHeight); }
}

// --- dialects: request bodies and stream handlers --------------------------------------------

function providerName(info) {
  if (!info) return "";
  return "runs on the server: " + (info.plugin_id || info.server_label || info.type || "");
}

// The sampling settings as the form holds them: numbers or null (the server's default).
function sampling() {
  const number = (id) => {
    const raw = $(id).value.trim();
    return raw === "" || Number.isNaN(Number(raw)) ? null : Number(raw);
  };
  return { temperature: number("temperature"), maxTokens: number("max-tokens"), effort: $("effort").value || null };
}

const only = (key, value) => (value == null ? {} : { [key]: value });

function dataUrlParts(url) {
  const m = /^data:([^;,]+);base64,(.*)$/s.exec(url);
  return m ? { media_type: m[1], data: m[2] } : { media_type: "image/png", data: "" };
}

// Every dialect's user content from the neutral message: text first, then its images.
const CONTENT = {
  chat: (m) => (m.images && m.images.length
    ? [...(m.text ? [{ type: "text", text: m.text }] : []), ...m.images.map((url) => ({ type: "image_url", image_url: { url } }))]
    : m.text),
  responses: (m) => (m.images && m.images.length
    ? [...(m.text ? [{ type: "input_text", text: m.text }] : []), ...m.images.map((url) => ({ type: "input_image", image_url: url }))]
    : m.text),
  anthropic: (m) => (m.images && m.images.length
    ? [...m.images.map((url) => ({ type: "image", source: { type: "base64", ...dataUrlParts(url) } })), ...(m.text ? [{ type: "text", text: m.text }] : [])]
    : m.text),
};

function resend(history, content) {
  return history.map((m) => (m.role === "user"
    ? { role: "user", content: content(m) }
    : { role: "assistant", content: assistantText(m) }));
}

// LM Studio takes only the settings a model lists (some have just "off" and "on").
function lmstudioReasoning(model, effort) {
  const wanted = effort === "none" ? "off" : effort;
  const options = state.reasoningOptions.get(model);
  if (!options || options.includes(wanted)) return wanted;
  return wanted !== "off" && options.includes("on") ? "on" : wanted;
}

// Anthropic has no effort field of its own in thinking: a budget per level, the level itself in
// output_config (what Sluicegate reads first), and max_tokens kept above the budget.
const THINKING_BUDGET = { low: 1024, medium: 4096, high: 16384 };

const DIALECTS = {
  chat: {
    label: "Chat Completions",
    path: "/v1/chat/completions",
    body: ({ model, system, history, user, s }) => ({
      model, stream: true, stream_options: { include_usage: true },
      messages: [...(system ? [{ role: "system", content: system }] : []),
        ...resend([...history, user], CONTENT.chat)],
      ...only("temperature", s.temperature), ...only("max_completion_tokens", s.maxTokens),
      ...only("reasoning_effort", s.effort),
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
    label: "Responses",
    path: "/v1/responses",
    body: ({ model, system, history, user, s }) => ({
      model, stream: true, store: false, ...(system ? { instructions: system } : {}),
      input: resend([...history, user], CONTENT.responses),
      ...only("temperature", s.temperature), ...only("max_output_tokens", s.maxTokens),
      ...(s.effort ? { reasoning: { effort: s.effort } } : {}),
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

  // LM Studio keeps a conversation server-side: when the previous answer came from it, the
  // request continues from its response id; otherwise (a new chat, or earlier turns made in
  // another dialect) the earlier turns go along as a transcript ahead of the new message.
  lmstudio: {
    label: "LM Studio",
    path: "/api/v1/chat",
    body: ({ model, system, history, user, s, unchained }) => {
      const integrations = $("integrations").value.split(",").map((x) => x.trim()).filter(Boolean);
      const last = history[history.length - 1];
      const previous = !unchained && last && last.dialect === "lmstudio" && last.responseId;
      const items = [];
      if (history.length && !previous) {
        const lines = history.map((m) => (m.role === "user"
          ? `User: ${m.text}${m.images && m.images.length ? ` [${m.images.length} image(s)]` : ""}`
          : `Assistant: ${assistantText(m)}`));
        items.push({ type: "text", content: `The conversation so far:\n\n${lines.join("\n\n")}` });
      }
      if (user.text) items.push({ type: "text", content: user.text });
      for (const url of user.images || []) items.push({ type: "image", data_url: url });
      const input = items.length === 1 && items[0].type === "text" ? items[0].content : items;
      return {
        model, stream: true, input,
        ...(system ? { system_prompt: system } : {}),
        ...(previous ? { previous_response_id: previous } : {}),
        ...(integrations.length ? { integrations } : {}),
        ...only("temperature", s.temperature), ...only("max_output_tokens", s.maxTokens),
        ...(s.effort ? { reasoning: lmstudioReasoning(model, s.effort) } : {}),
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
              turn.msg.responseId = (e.result && e.result.response_id) || null;
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
    label: "Anthropic",
    path: "/v1/messages",
    body: ({ model, system, history, user, s }) => {
      const budget = THINKING_BUDGET[s.effort];
      const maxTokens = s.maxTokens ?? (budget ? budget + 4096 : 4096);
      let thinking = {};
      if (s.effort === "none") thinking = { thinking: { type: "disabled" } };
      else if (budget) {
        thinking = { output_config: { effort: s.effort } };
        // Anthropic wants 1024 <= budget_tokens < max_tokens: below that, the effort alone.
        if (maxTokens > 1024) thinking.thinking = { type: "enabled", budget_tokens: Math.min(budget, maxTokens - 1) };
      }
      return {
        model, stream: true, max_tokens: maxTokens, ...(system ? { system } : {}),
        messages: resend([...history, user], CONTENT.anthropic),
        ...only("temperature", s.temperature), ...thinking,
      };
    },
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

async function send(text, images) {
  const dialectName = $("dialect").value;
  const dialect = DIALECTS[dialectName];
  const model = $("model").value;
  if (!model) { setStatus("Pick a model first."); return false; }
  setStatus("");
  const chat = currentChat();
  const history = priorTurns(chat.messages);
  const user = { role: "user", text, images };
  const answer = { role: "assistant", model, dialect: dialectName, blocks: [], stats: "" };
  chat.messages.push(user, answer);
  chat.title = chat.title || (text || "Image").slice(0, 60);
  chat.updated = Date.now();
  saveChats();
  showChats();
  userTurn(user);
  const turn = new Turn(answer);
  const controller = new AbortController();
  state.controller = controller;
  busy(true);
  try {
    const context = { model, system: $("system").value.trim(), history, user, s: sampling(), unchained: false };
    const post = (body) => fetch(dialect.path, {
      method: "POST",
      headers: { ...headers(), ...(dialect.extraHeaders || {}) },
      body: JSON.stringify(body),
      signal: controller.signal,
    });
    const body = dialect.body(context);
    let response = await post(body);
    if (!response.ok) {
      const text = await response.text();
      // A stored LM Studio response the server no longer has (restarted, expired): send the
      // conversation as a transcript instead.
      if (body.previous_response_id && text.includes("previous_response_not_found")) {
        context.unchained = true;
        response = await post(dialect.body(context));
        if (!response.ok) { turn.error(await errorText(response)); turn.finish({ note: "failed" }); return true; }
      } else { turn.error(await errorText(response, text)); turn.finish({ note: "failed" }); return true; }
    }
    const handler = dialect.handler(turn);
    await readSSE(response, (name, data) => {
      turn.raw(name, data);
      if (data === "[DONE]") return; // the OpenAI dialects' end marker
      try { handler.event(name, data); } catch (e) { turn.error(`could not read an event: ${e}`); }
    });
    handler.end();
  } catch (e) {
    if (e.name === "AbortError") turn.finish({ note: "stopped" });
    else { turn.error(String(e)); turn.finish({ note: "failed" }); }
  } finally {
    state.controller = null;
    busy(false);
    chat.updated = Date.now();
    saveChats();
  }
  return true;
}

function busy(on) {
  $("send").disabled = on;
  $("stop").disabled = !on;
}

function stop() {
  if (state.controller) state.controller.abort();
}

// --- image attachments -----------------------------------------------------------------------

function showAttachments() {
  const box = $("attachments");
  box.replaceChildren(...state.attachments.map((url, n) => {
    const item = document.createElement("span");
    item.className = "attachment";
    const img = document.createElement("img");
    img.src = url;
    img.alt = `attachment ${n + 1}`;
    const remove = button("remove", "×", `Remove attachment ${n + 1}`, () => {
      state.attachments.splice(n, 1);
      showAttachments();
      $("prompt").focus();
    });
    item.append(img, remove);
    return item;
  }));
  box.hidden = !state.attachments.length;
}

function attach(files) {
  for (const file of files) {
    if (!file.type.startsWith("image/")) { setStatus(`${file.name} is not an image.`); continue; }
    const reader = new FileReader();
    reader.onload = () => { state.attachments.push(String(reader.result)); showAttachments(); };
    reader.onerror = () => setStatus(`Could not read ${file.name}.`);
    reader.readAsDataURL(file);
  }
}

// --- the list of conversations ---------------------------------------------------------------

// A button; `label` is what a screen reader says when the text is a symbol.
function button(className, text, label, onClick) {
  const el = document.createElement("button");
  el.type = "button";
  el.className = className;
  el.textContent = text;
  if (label) el.setAttribute("aria-label", label);
  el.addEventListener("click", onClick);
  return el;
}

function showChats() {
  const list = $("chat-list");
  const chats = state.chats.filter((c) => c.messages.length).sort((a, b) => b.updated - a.updated);
  list.replaceChildren(...chats.map((chat) => {
    const li = document.createElement("li");
    const open = button("open", chat.title || "Untitled", null, () => openChat(chat.id));
    open.title = chat.title;
    if (chat.id === state.current) open.setAttribute("aria-current", "true");
    li.dataset.id = chat.id;
    li.append(
      open,
      button("rename", "✎", `Rename conversation: ${chat.title}`, () => renameChat(chat, open)),
      button("delete", "×", `Delete conversation: ${chat.title}`, () => deleteChat(chat.id)),
    );
    return li;
  }));
  $("chats-count").textContent = chats.length ? `(${chats.length})` : "";
}

// The title edited in place: Enter (or leaving the field) keeps it, Escape gives it up.
function renameChat(chat, button) {
  const input = document.createElement("input");
  input.type = "text";
  input.className = "title-edit";
  input.value = chat.title;
  input.setAttribute("aria-label", "Conversation title");
  button.replaceWith(input);
  input.focus();
  input.select();
  let done = false;
  const finish = (keep) => {
    if (done) return;
    done = true;
    if (keep && input.value.trim()) {
      chat.title = input.value.trim().slice(0, 120);
      saveChats();
    }
    showChats();
  };
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter") { event.preventDefault(); finish(true); }
    else if (event.key === "Escape") { event.stopPropagation(); finish(false); }
  });
  input.addEventListener("blur", () => finish(true));
}

function showConversation() {
  $("conversation").replaceChildren();
  const chat = state.chats.find((c) => c.id === state.current);
  for (const m of chat ? chat.messages : []) {
    if (m.role === "user") userTurn(m);
    else Turn.replay(m);
  }
}

function openChat(id) {
  if (state.controller) return; // not while an answer streams into the one on screen
  state.current = id;
  saveChats();
  showChats();
  showConversation();
}

function deleteChat(id) {
  if (state.controller && id === state.current) return;
  state.chats = state.chats.filter((c) => c.id !== id);
  if (state.current === id) state.current = null;
  saveChats();
  showChats();
  showConversation();
}

function newChat() {
  if (state.controller) return;
  state.current = null;
  saveChats();
  showChats();
  showConversation();
  $("prompt").focus();
}

// --- preferences and wiring ------------------------------------------------------------------

const SAVED_FIELDS = ["dialect", "integrations", "temperature", "max-tokens", "effort"];

function localPrefs() {
  try { return JSON.parse(localStorage.getItem(PREFS) || "{}"); } catch (_) { return {}; }
}

function savePrefs() {
  const prefs = { model: $("model").value };
  for (const id of SAVED_FIELDS) prefs[id] = $(id).value;
  localStorage.setItem(PREFS, JSON.stringify(prefs));
}

function showDialect() {
  document.body.classList.toggle("lmstudio", $("dialect").value === "lmstudio");
}

function submit() {
  const text = $("prompt").value.trim();
  const images = state.attachments.slice();
  if ((!text && !images.length) || state.controller) return;
  if (!$("model").value) { setStatus("Pick a model first."); return; }
  $("prompt").value = "";
  state.attachments = [];
  showAttachments();
  send(text, images);
}

document.addEventListener("DOMContentLoaded", () => {
  const prefs = localPrefs();
  $("api-key").value = localStorage.getItem(KEY_STORAGE) || "";
  for (const id of SAVED_FIELDS) if (prefs[id] != null) $(id).value = prefs[id];
  showDialect();
  loadChats();
  showChats();
  showConversation();
  if (window.matchMedia("(max-width: 48rem)").matches) $("chats-box").open = false;
  $("api-key").addEventListener("change", () => {
    localStorage.setItem(KEY_STORAGE, $("api-key").value.trim());
    loadModels();
  });
  $("dialect").addEventListener("change", () => { showDialect(); savePrefs(); }); // the conversation stays
  $("model").addEventListener("change", savePrefs);
  for (const id of ["integrations", "temperature", "max-tokens", "effort"]) $(id).addEventListener("change", savePrefs);
  $("reload-models").addEventListener("click", loadModels);
  $("stop").addEventListener("click", stop);
  $("clear").addEventListener("click", newChat);
  $("attach").addEventListener("click", () => $("attach-file").click());
  $("attach-file").addEventListener("change", (event) => { attach(event.target.files); event.target.value = ""; });
  $("composer").addEventListener("submit", (event) => { event.preventDefault(); submit(); });
  $("prompt").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      submit();
    }
  });
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && state.controller) { event.preventDefault(); stop(); }
  });
  $("prompt").addEventListener("paste", (event) => {
    const files = [...(event.clipboardData?.files || [])].filter((f) => f.type.startsWith("image/"));
    if (files.length) { event.preventDefault(); attach(files); }
  });
  // Copy buttons: a code block's code, or a whole message (an answer as its Markdown source).
  $("conversation").addEventListener("click", (event) => {
    const button = event.target.closest("button.copy");
    if (!button) return;
    const code = button.closest(".code");
    if (code) copyText(code.querySelector("code").textContent, button);
    else copyText(button.closest(".turn").copySource(), button);
  });
  loadModels();
});
