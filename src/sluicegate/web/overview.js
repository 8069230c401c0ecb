// The operators' overview: `/metrics` (Prometheus text) read every 2 s and shown as tables, and
// with the admin key the runtime keys' limits, today's usage and budgets (`/admin/usage`).
"use strict";

const KEY_STORAGE = "sluicegate.apiKey"; // the playground's: one key for both pages
const ADMIN_STORAGE = "sluicegate.adminKey"; // sessionStorage: the admin key leaves with the tab
const INTERVAL_MS = 2000;
const $ = (id) => document.getElementById(id);
let previous = null; // the last scrape: {at, samples}, for rates

// "name{a="x",b="y"} 1.5" → {name, labels: {a: "x", b: "y"}, value}
function parseMetrics(text) {
  const samples = [];
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const match = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line);
    if (!match) continue;
    const labels = {};
    for (const pair of (match[2] || "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) {
      labels[pair[1]] = pair[2].replace(/\\(.)/g, (_, c) => (c === "n" ? "\n" : c));
    }
    samples.push({ name: match[1], labels, value: Number(match[3]) });
  }
  return samples;
}

function sum(samples, name, keyOf) {
  const totals = new Map();
  for (const s of samples) {
    if (s.name !== name) continue;
    const key = keyOf ? keyOf(s.labels) : "";
    totals.set(key, (totals.get(key) || 0) + s.value);
  }
  return totals;
}

// histogram_quantile over cumulative buckets {le → count}, linear within a bucket.
function quantile(q, buckets) {
  const sorted = [...buckets.entries()].map(([le, n]) => [le === "+Inf" ? Infinity : Number(le), n]).sort((a, b) => a[0] - b[0]);
  const total = sorted.length ? sorted[sorted.length - 1][1] : 0;
  if (!total) return null;
  const rank = q * total;
  let lowerBound = 0, lowerCount = 0;
  for (const [bound, count] of sorted) {
    if (count >= rank) {
      if (bound === Infinity) return lowerBound;
      const inBucket = count - lowerCount;
      return inBucket ? lowerBound + (bound - lowerBound) * ((rank - lowerCount) / inBucket) : bound;
    }
    lowerBound = bound; lowerCount = count;
  }
  return lowerBound;
}

function seconds(value) {
  if (value === null || value === undefined) return "–";
  return value < 1 ? `${Math.round(value * 1000)} ms` : `${value.toFixed(2)} s`;
}

function fillTable(id, rows) {
  const body = document.querySelector(`#${id} tbody`);
  body.replaceChildren(...rows.map((cells) => {
    const tr = document.createElement("tr");
    for (const cell of cells) {
      const td = document.createElement("td");
      if (typeof cell === "object" && cell !== null) { td.textContent = cell.text; if (cell.cls) td.className = cell.cls; }
      else { td.textContent = String(cell); if (typeof cell === "number") td.className = "num"; }
      tr.append(td);
    }
    return tr;
  }));
}

function render(samples, at) {
  const value = (name) => sum(samples, name).get("") || 0;
  $("in-flight").textContent = value("sluicegate_requests_in_flight");
  const store = samples.find((s) => s.name === "sluicegate_store_up");
  $("store").textContent = store ? (store.value ? "up" : "down") : "–";
  $("store").className = "value " + (store ? (store.value ? "up" : "down") : "");
  $("loaded").textContent = value("sluicegate_model_loaded");

  const queued = sum(samples, "sluicegate_queue_depth", (l) => l.model);
  const generations = samples
    .filter((s) => s.name === "sluicegate_generations_in_flight" && s.value > 0)
    .map((s) => [s.labels.model || "–", s.labels.dialect || "–", s.value, queued.get(s.labels.model) || 0]);
  fillTable("generations", generations);

  // The rate comes from the engine's deltas, counted as they are generated (a request's
  // usage counters only move when it ends).
  const deltas = (from) => sum(from, "sluicegate_engine_deltas_total", (l) => l.model);
  const outputs = sum(samples, "sluicegate_completion_tokens_total", (l) => l.model);
  const requests = sum(samples, "sluicegate_request_duration_seconds_count", (l) => l.model);
  const now = deltas(samples);
  const before = previous ? deltas(previous.samples) : new Map();
  const elapsed = previous ? (at - previous.at) / 1000 : 0;
  let totalRate = 0;
  const models = new Set([...now.keys(), ...outputs.keys(), ...requests.keys()].filter(Boolean));
  const rows = [];
  for (const model of [...models].sort()) {
    const buckets = new Map();
    for (const s of samples) {
      if (s.name === "sluicegate_time_to_first_token_seconds_bucket" && s.labels.model === model) {
        buckets.set(s.labels.le, (buckets.get(s.labels.le) || 0) + s.value);
      }
    }
    const rate = elapsed > 0 ? Math.max(0, ((now.get(model) || 0) - (before.get(model) || 0)) / elapsed) : 0;
    totalRate += rate;
    rows.push([model, Number(rate.toFixed(1)), outputs.get(model) || 0, seconds(quantile(0.5, buckets)),
      seconds(quantile(0.95, buckets)), seconds(quantile(0.99, buckets)), requests.get(model) || 0]);
  }
  fillTable("models", rows);
  $("tokens-rate").textContent = previous ? totalRate.toFixed(1) : "–";

  const outstanding = new Map(samples.filter((s) => s.name === "sluicegate_upstream_replica_outstanding")
    .map((s) => [`${s.labels.model}|${s.labels.replica}`, s.value]));
  fillTable("replicas", samples.filter((s) => s.name === "sluicegate_upstream_replica_healthy").map((s) => [
    s.labels.model, s.labels.replica,
    { text: s.value ? "healthy" : "unhealthy", cls: s.value ? "up" : "down" },
    outstanding.get(`${s.labels.model}|${s.labels.replica}`) || 0,
  ]));
}

function limitsText(limits) {
  const parts = [["rpm", "req/min"], ["tpm", "tok/min"], ["concurrent", "at once"]]
    .filter(([name]) => limits && limits[name] !== null && limits[name] !== undefined)
    .map(([name, unit]) => `${limits[name]} ${unit}`);
  return parts.length ? parts.join(", ") : "none";
}

function budgetText(budget) {
  if (!budget) return ["none", "–"];
  const per = budget.period === "day" ? "/day" : "/month";
  const amounts = [], left = [];
  if (budget.tokens !== null) { amounts.push(`${budget.tokens} tokens`); left.push(`${budget.tokens_left} tokens`); }
  if (budget.cost !== null) { amounts.push(`${budget.cost}`); left.push(`${budget.cost_left}`); }
  return [amounts.join(" + ") + per, budget.exhausted ? "exhausted" : left.join(" + ")];
}

// One row per runtime key: its limits, today's use and its budget (GET /admin/usage).
async function refreshKeys() {
  const key = $("admin-key").value.trim();
  if (!key) {
    $("keys-status").textContent = "Type the admin key ([server] admin_key) above to see the keys.";
    fillTable("keys", []);
    return;
  }
  const day = new Date().toISOString().slice(0, 10); // the server counts days in UTC
  try {
    const response = await fetch(`/admin/usage?from=${day}&to=${day}`, { headers: { Authorization: "Bearer " + key } });
    if (!response.ok) {
      $("keys-status").textContent = response.status === 401 ? "401: that is not the admin key." : `GET /admin/usage: ${response.status}`;
      fillTable("keys", []);
      return;
    }
    const usage = await response.json();
    $("keys-status").textContent = "";
    fillTable("keys", usage.keys.map((k) => {
      const [budget, left] = budgetText(k.budget);
      const name = k.revoked_at ? { text: `${k.name} (revoked)`, cls: "down" } : k.name;
      return [name, k.owner || "–", limitsText(k.limits), k.used.requests, k.used.input_tokens,
        k.used.output_tokens, k.used.cost, budget, left && k.budget && k.budget.exhausted ? { text: left, cls: "down" } : left];
    }));
  } catch (error) {
    $("keys-status").textContent = "The server did not answer: " + error;
  }
}

async function refresh() {
  refreshKeys();
  const key = $("api-key").value.trim() || $("admin-key").value.trim(); // the admin key reads /metrics too
  try {
    const response = await fetch("/metrics", { headers: key ? { Authorization: "Bearer " + key } : {} });
    if (!response.ok) {
      $("status").textContent = response.status === 401 ? "401: type the server's API key above." : `GET /metrics: ${response.status}`;
      return;
    }
    const at = Date.now();
    const samples = parseMetrics(await response.text());
    $("status").textContent = "";
    render(samples, at);
    previous = { at, samples };
    $("updated").textContent = "updated " + new Date(at).toLocaleTimeString();
  } catch (error) {
    $("status").textContent = "The server did not answer: " + error;
  }
}

$("api-key").value = localStorage.getItem(KEY_STORAGE) || "";
$("api-key").addEventListener("change", () => {
  localStorage.setItem(KEY_STORAGE, $("api-key").value.trim());
  previous = null;
  refresh();
});
$("admin-key").value = sessionStorage.getItem(ADMIN_STORAGE) || "";
$("admin-key").addEventListener("change", () => {
  sessionStorage.setItem(ADMIN_STORAGE, $("admin-key").value.trim());
  refreshKeys();
});
refresh();
setInterval(refresh, INTERVAL_MS);
