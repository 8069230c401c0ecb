// The models page: the LM Studio models API (list, load, unload, download) and Sluicegate's
// two additions to it (download options, cancel).
"use strict";

const KEY_STORAGE = "sluicegate.apiKey"; // shared with the playground and the overview
const POLL_MS = 500;
const $ = (id) => document.getElementById(id);
let job = null; // the download being watched: {job_id, ...}

function headers(json) {
  const h = json ? { "Content-Type": "application/json" } : {};
  const key = $("api-key").value.trim();
  if (key) h.Authorization = "Bearer " + key;
  return h;
}

// A call that answers its JSON, or throws an Error with the server's own words.
async function call(method, path, body) {
  const response = await fetch(path, { method, headers: headers(body !== undefined), body: body === undefined ? undefined : JSON.stringify(body) });
  let data = null;
  try { data = await response.json(); } catch (_) { /* not JSON */ }
  if (!response.ok) {
    const message = data && data.error ? (data.error.message || data.error) : response.statusText;
    throw new Error(`${response.status}: ${message}`);
  }
  return data;
}

// A line under the header: what just happened, or (`error`) what went wrong, in words.
function say(text, error) {
  $("status").textContent = text || "";
  $("status").className = error ? "error" : "info";
}

function bytes(n) {
  if (!n) return "–";
  const units = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  while (n >= 1000 && i < units.length - 1) { n /= 1000; i++; }
  return `${n.toFixed(n >= 100 || i === 0 ? 0 : 1)} ${units[i]}`;
}

function duration(seconds) {
  if (seconds < 90) return `${seconds} s`;
  if (seconds < 5400) return `${Math.round(seconds / 60)} min`;
  return `${(seconds / 3600).toFixed(1)} h`;
}

function cell(content, className) {
  const td = document.createElement("td");
  if (content instanceof Node) td.append(content); else td.textContent = content ?? "–";
  if (className) td.className = className;
  return td;
}

function button(label, onClick, primary) {
  const b = document.createElement("button");
  b.type = "button";
  b.textContent = label;
  if (primary) b.className = "primary";
  b.addEventListener("click", async () => {
    b.disabled = true;
    try { await onClick(); } catch (error) { say(error.message, true); } finally { b.disabled = false; }
  });
  return b;
}

function capabilities(model) {
  const span = document.createElement("span");
  span.className = "caps";
  const caps = model.capabilities || {};
  const names = [];
  if (model.type === "embedding" || model.type === "embeddings") names.push("embeddings");
  if (model.type === "stt") names.push("speech to text");
  if (model.type === "tts") names.push("text to speech");
  if (caps.trained_for_tool_use) names.push("tools");
  if (caps.vision) names.push("vision");
  if (caps.reasoning) names.push("reasoning");
  for (const name of names) {
    const tag = document.createElement("span");
    tag.textContent = name;
    span.append(tag);
  }
  return span;
}

function name(model) {
  const box = document.createElement("div");
  box.textContent = model.key;
  if (model.display_name && model.display_name !== model.key) {
    const about = document.createElement("div");
    about.className = "about";
    about.textContent = model.display_name;
    box.append(about);
  }
  return box;
}

function state(model) {
  const box = document.createElement("div");
  const instances = model.loaded_instances || [];
  if (!instances.length) { box.textContent = "not loaded"; return box; }
  for (const instance of instances) {
    const line = document.createElement("div");
    line.className = "instance";
    const context = instance.config && instance.config.context_length ? ` · ctx ${instance.config.context_length}` : "";
    const ttl = instance.unloads_in_seconds !== undefined ? ` · idle TTL left ${duration(instance.unloads_in_seconds)}` : "";
    // Memory: the weights plus the KV cache at the loaded context (what the engine reports).
    const kv = model.context && model.context.kv_cache_bytes ? model.context.kv_cache_bytes : 0;
    const memory = model.size_bytes ? ` · ~${bytes(model.size_bytes + kv)}` : "";
    line.append(`loaded: ${instance.id}${context}${memory}${ttl}`, button("Unload", async () => {
      await call("POST", "/api/v1/models/unload", { instance_id: instance.id });
      say(`Unloaded ${instance.id}.`);
      await refresh();
    }));
    box.append(line);
  }
  return box;
}

async function refresh() {
  let listing;
  try {
    listing = await call("GET", "/api/v1/models");
  } catch (error) {
    say(error.message.startsWith("401") ? "401: type the server's API key above." : error.message, true);
    return;
  }
  const rows = listing.models.map((model) => {
    const tr = document.createElement("tr");
    tr.dataset.model = model.key;
    const quant = model.quantization && typeof model.quantization === "object" ? model.quantization.name : model.quantization;
    tr.append(
      cell(name(model)), cell(model.engine), cell(model.format), cell(bytes(model.size_bytes), "num"),
      cell(quant), cell(model.max_context_length ? String(model.max_context_length) : "–", "num"),
      cell(capabilities(model)), cell(state(model), "state"),
      cell(button((model.loaded_instances || []).length ? "Load another" : "Load", async () => {
        const loaded = await call("POST", "/api/v1/models/load", { model: model.key });
        say(`Loaded ${loaded.instance_id} in ${loaded.load_time_seconds} s.`);
        await refresh();
      })),
    );
    return tr;
  });
  document.querySelector("#models tbody").replaceChildren(...rows);
}

async function findFiles() {
  const repo = $("repo").value.trim();
  if (!repo) { say("Type a repository: owner/repo."); return; }
  const select = $("quantization");
  const options = await call("GET", "/api/v1/models/download/options?model=" + encodeURIComponent(repo));
  if (!options.files.length) { say(`${repo} has no GGUF model files.`); return; }
  select.replaceChildren(...options.files.map((file) => {
    const option = document.createElement("option");
    option.value = file.quantization || "";
    option.textContent = `${file.quantization || "?"} · ${file.file} · ${bytes(file.size_bytes)}`;
    return option;
  }));
  select.disabled = false;
  $("download").disabled = false;
  say("");
}

function showJob(body) {
  $("download-job").hidden = false;
  const total = body.total_size_bytes || 0;
  const done = body.status === "completed" ? total : body.downloaded_bytes || 0;
  const fraction = total ? done / total : 0;
  $("job-progress").value = fraction;
  $("job-pct").textContent = `${Math.floor(fraction * 100)}%`;
  $("job-label").textContent = `${body.file || body.model}: ${body.status}`;
  $("cancel").disabled = body.status !== "downloading";
  if (body.error && body.status !== "cancelled") say(`The download failed: ${body.error}`, true);
}

async function watch() {
  while (job && job.status === "downloading") {
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
    job = await call("GET", `/api/v1/models/download/status/${job.job_id}`);
    showJob(job);
  }
  if (job && job.status === "completed") { say(`Downloaded ${job.file}.`); await refresh(); }
}

async function download(event) {
  event.preventDefault();
  const body = { model: $("repo").value.trim() };
  if ($("quantization").value) body.quantization = $("quantization").value;
  const started = await call("POST", "/api/v1/models/download", body);
  if (started.status === "already_downloaded") {
    showJob({ ...started, status: "completed", total_size_bytes: 1, downloaded_bytes: 1 });
    say(`${started.file} is already downloaded.`);
    await refresh();
    return;
  }
  job = started;
  showJob(job);
  await watch();
}

$("api-key").value = localStorage.getItem(KEY_STORAGE) || "";
$("api-key").addEventListener("change", () => { localStorage.setItem(KEY_STORAGE, $("api-key").value.trim()); refresh(); });
$("refresh").addEventListener("click", refresh);
$("find").addEventListener("click", () => findFiles().catch((error) => say(error.message, true)));
$("download-form").addEventListener("submit", (event) => download(event).catch((error) => say(error.message, true)));
$("cancel").addEventListener("click", () => job && call("POST", "/api/v1/models/download/cancel", { job_id: job.job_id })
  .then((body) => { job = body; showJob(body); say("Cancelling: the transfer stops at its next chunk."); }).catch((error) => say(error.message, true)));
refresh();
