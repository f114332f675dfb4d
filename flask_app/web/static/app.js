// edgerag's page: what is stored (the moorcheh-edge store the tour and the
// CLI fill, and each namespace's collections), uploads with progress, a
// streamed answer whose citation markers open the cited span. Plain JS
// against the HTTP API.
"use strict";

const $ = (id) => document.getElementById(id);
const MARKER = /\[\[(SRC:\d{4})\]\]/g;
const PARTIAL_MARKER = /\[\[?[^\]]*\]?\]?$/; // a marker still being generated
const TYPES = {
  txt: "text/plain", md: "text/markdown", markdown: "text/markdown", html: "text/html",
  htm: "text/html", csv: "text/csv", json: "application/json", pdf: "application/pdf",
};
const state = { sources: [], polling: new Map(), truncated: false };

function say(text, isError = false) {
  const box = $("message");
  box.textContent = text;
  box.className = isError ? "error" : "";
}

function headers(extra = {}) {
  const key = localStorage.getItem("edgerag-key") || "";
  return key ? { ...extra, Authorization: `Bearer ${key}` } : extra;
}

class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

// The message of any surface's error body.
function errorText(status, body) {
  const message = body?.error?.message || body?.message || body?.error || `HTTP ${status}`;
  return status === 401 ? `${message} (enter the API key above)` : message;
}

async function api(method, path, body) {
  const init = { method, headers: headers(body ? { "Content-Type": "application/json" } : {}) };
  if (body) init.body = JSON.stringify(body);
  const response = await fetch(path, init);
  const data = response.status === 204 ? null : await response.json().catch(() => null);
  if (!response.ok) throw new ApiError(response.status, errorText(response.status, data));
  return data;
}

const STORE = ""; // the namespace picker's value for the moorcheh-edge store
const ns = () => $("namespace").value;
const inStore = () => ns() === STORE;
const collection = () => $("collection").value;
const base = () => `/namespaces/${encodeURIComponent(ns())}/collections/${encodeURIComponent(collection())}`;

// "probe ≥ 0.42" when the hidden-state probe decides, else the refusal gate's thresholds
function gateLabel(gate) {
  if (gate.kind === "verifier") {
    const floor = gate.floor == null ? "" : `, floor ${Number(gate.floor.toPrecision(3))}`;
    return `verified ≥ ${Number(gate.threshold.toPrecision(3))}, ${gate.samples} samples${floor}`;
  }
  return `unverified, refusal ${gate.refusal_probability}`;
}

async function loadHealth() {
  try {
    const health = await (await fetch("/health")).json();
    $("health-status").textContent = health.status;
    $("health-status").className = `badge ${health.status}`;
    $("health-llm").textContent = health.llm
      ? (health.llm.preset ? `${health.llm.preset} (${health.llm.id})` : health.llm.id) : "none";
    $("health-embedder").textContent = health.embedder ? health.embedder.id : "none";
    $("health-gate").textContent = health.llm ? gateLabel(health.llm.answer_gate) : "none";
    $("health-gate").title = health.llm && health.llm.answer_gate.reason ? health.llm.answer_gate.reason : "";
    $("health-queue").textContent = health.llm
      ? `${health.llm.busy ? "generating" : "idle"}, ${health.llm.waiting} waiting` : "";
  } catch (err) {
    $("health-status").textContent = "unreachable";
    $("health-status").className = "badge degraded";
  }
}

// The picker: the moorcheh-edge store, then every namespace the key may use.
// First visit: the store when it holds items (the tour, the CLI), else the
// first namespace.
async function loadNamespaces(select) {
  const picker = $("namespace");
  // keep what is picked, unless the list held only the store (nothing to pick from yet)
  const current = select ?? (picker.options.length > 1 ? picker.value : null);
  let names = [];
  try {
    names = (await api("GET", "/namespaces")).namespaces.map((n) => n.name);
  } catch (err) {
    say(err.message, true);
  }
  const store = new Option("moorcheh-edge store", STORE);
  picker.replaceChildren(store, ...names.map((name) => new Option(name, name)));
  if (current !== null && (current === STORE || names.includes(current))) picker.value = current;
  else {
    let items = 0;
    try { items = (await (await fetch("/health")).json()).items || 0; } catch (err) { /* shown by loadHealth */ }
    picker.value = items || !names.length ? STORE : names[0];
  }
  await loadCollections();
}

async function loadStore() {
  $("collection-label").hidden = true;
  $("files-first").textContent = "Item";
  try {
    const page = await api("GET", `/export?limit=${MAX_LISTED_ITEMS}`);
    const rows = page.items.map((item) => {
      const row = document.createElement("tr");
      row.dataset.item = item.id;
      row.innerHTML = "<td class=path></td><td class='status ready'>stored</td><td></td><td></td>";
      row.querySelector(".path").textContent = `${item.id}: ${item.text ?? ""}`;
      return row;
    });
    $("files").tBodies[0].replaceChildren(...rows);
    $("files-count").textContent = `${page.item_count} item${page.item_count === 1 ? "" : "s"} in the moorcheh-edge store`
      + (page.next_cursor ? ` (first ${rows.length} shown)` : "");
  } catch (err) {
    say(err.message, true);
  }
}

async function loadCollections(select) {
  if (inStore()) return loadStore();
  $("collection-label").hidden = false;
  $("files-first").textContent = "Path";
  const list = $("collection");
  let names = [];
  try {
    names = (await api("GET", `/namespaces/${encodeURIComponent(ns())}/collections`)).collections
      .map((c) => c.name);
  } catch (err) {
    if (err.status !== 404) return say(err.message, true); // 404: the namespace is new
  }
  list.replaceChildren(...names.map((name) => new Option(name, name)));
  if (select && names.includes(select)) list.value = select;
  if (names.length) await loadFiles();
  else {
    $("files").tBodies[0].replaceChildren();
    $("files-count").textContent = "";
  }
}

async function createCollection() {
  const name = $("new-collection").value.trim();
  const space = $("new-namespace").value.trim() || ns();
  if (!space) return say("Name the new collection's namespace first.", true);
  if (!name) return say("Name the new collection first.", true);
  try {
    await api("PUT", `/namespaces/${encodeURIComponent(space)}`);
    await api("PUT", `/namespaces/${encodeURIComponent(space)}/collections/${encodeURIComponent(name)}`,
      { access_control: $("new-access").value });
    say(`Collection ${space}/${name} is ready for documents.`);
    await loadNamespaces(space);
    await loadCollections(name);
  } catch (err) {
    say(err.message, true);
  }
}

function fileRow(file) {
  let row = document.querySelector(`tr[data-file="${file.file_id}"]`);
  if (!row) {
    row = document.createElement("tr");
    row.dataset.file = file.file_id;
    row.innerHTML = "<td class=path></td><td class=status></td><td><progress max=1 value=0></progress></td>"
      + "<td><button type=button class=delete title='Delete this file'>Delete</button></td>";
    row.querySelector(".delete").addEventListener("click", () => deleteFile(file.file_id));
    $("files").tBodies[0].prepend(row);
  }
  row.querySelector(".path").textContent = file.path;
  const status = row.querySelector(".status");
  status.textContent = file.status === "failed" ? `failed: ${file.error?.message || ""}` : file.status;
  status.className = `status ${file.status}`;
  const bar = row.querySelector("progress");
  if (file.progress && file.progress.chunks_total) {
    bar.max = file.progress.chunks_total;
    bar.value = file.progress.chunks_done;
  } else if (file.status !== "processing") {
    bar.max = 1;
    bar.value = 1;
  }
  return row;
}

const MAX_LISTED = 5000; // files shown per collection (100 per request)
const MAX_LISTED_ITEMS = 1000; // store items shown (one export page)

async function loadFiles() {
  if (inStore()) return loadStore();
  if (!collection()) return;
  try {
    const files = [];
    let token = null;
    do {
      const query = `page_size=100${token ? `&page_token=${encodeURIComponent(token)}` : ""}`;
      const page = await api("GET", `${base()}/files?${query}`);
      files.push(...page.files);
      token = page.next_page_token;
    } while (token && files.length < MAX_LISTED);
    $("files").tBodies[0].replaceChildren();
    for (const file of files.reverse()) {
      fileRow(file);
      if (file.status === "processing") watch(file.file_id);
    }
    state.truncated = Boolean(token);
    showCount();
  } catch (err) {
    say(err.message, true);
  }
}

function showCount() {
  const n = $("files").tBodies[0].rows.length;
  $("files-count").textContent = state.truncated
    ? `the first ${MAX_LISTED} files` : `${n} file${n === 1 ? "" : "s"}`;
}

async function deleteFile(fileId) {
  const row = document.querySelector(`tr[data-file="${fileId}"]`);
  const path = row?.querySelector(".path").textContent || fileId;
  if (!confirm(`Delete ${path} from ${ns()}/${collection()}?`)) return;
  try {
    await api("DELETE", `${base()}/files/${encodeURIComponent(fileId)}`);
    clearInterval(state.polling.get(fileId));
    state.polling.delete(fileId);
    row?.remove();
    say(`${path} was deleted.`);
    await loadFiles();
  } catch (err) {
    say(err.message, true);
  }
}

// Poll a processing file until it is ready or failed; only uploads from this
// page announce the outcome, so listing a busy collection keeps the message.
function watch(fileId, announce = false) {
  if (state.polling.has(fileId)) return;
  const url = `${base()}/files/${fileId}`;
  const timer = setInterval(async () => {
    try {
      const file = await api("GET", url);
      fileRow(file);
      if (file.status !== "processing") {
        clearInterval(timer);
        state.polling.delete(fileId);
        if (announce) {
          say(file.status === "ready" ? `${file.path} is ready.` : `${file.path} failed.`,
            file.status !== "ready");
        }
      }
    } catch (err) {
      clearInterval(timer);
      state.polling.delete(fileId);
      say(err.message, true);
    }
  }, 300);
  state.polling.set(fileId, timer);
}

async function send(body) {
  const file = await api("POST", `${base()}/files`, body);
  fileRow(file);
  showCount();
  watch(file.file_id, true);
}

function base64Of(buffer) {
  const bytes = new Uint8Array(buffer);
  let binary = "";
  for (let i = 0; i < bytes.length; i += 0x8000) {
    binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  }
  return btoa(binary);
}

async function uploadFiles() {
  if (inStore()) return say("Files go into a collection: pick or create one (the store takes pasted text).", true);
  if (!collection()) return say("Create or pick a collection first.", true);
  const files = [...$("file-input").files];
  if (!files.length) return say("Choose files to upload.", true);
  for (const file of files) {
    const type = TYPES[file.name.split(".").pop().toLowerCase()];
    if (!type) {
      say(`${file.name}: unsupported type (txt, md, html, csv, json, pdf).`, true);
      continue;
    }
    const body = { path: file.name, content_type: type };
    if (type === "application/pdf") body.data = base64Of(await file.arrayBuffer());
    else body.text = await file.text();
    try {
      await send(body);
      say(`${file.name} uploaded; indexing…`);
    } catch (err) {
      say(`${file.name}: ${err.message}`, true);
    }
  }
  $("file-input").value = "";
}

async function pasteText() {
  const path = $("paste-path").value.trim();
  const text = $("paste-text").value;
  if (!path || !text.trim()) return say("Give the text a path and some content.", true);
  if (inStore()) {
    try {
      await api("POST", "/upload", { store_mode: "text", items: [{ id: path, text }] });
      say(`Stored ${path} in the moorcheh-edge store.`);
      return await loadStore();
    } catch (err) {
      return say(err.message, true);
    }
  }
  if (!collection()) return say("Create or pick a collection first.", true);
  const type = path.endsWith(".md") || path.endsWith(".markdown") ? "text/markdown" : "text/plain";
  try {
    await send({ path, content_type: type, text });
    say(`${path} added; indexing…`);
    $("paste-text").value = "";
  } catch (err) {
    say(err.message, true);
  }
}

// The answer with its checked markers as buttons that open the cited span.
function renderAnswer(text) {
  const box = $("answer");
  box.replaceChildren();
  let last = 0;
  for (const match of text.matchAll(MARKER)) {
    box.append(text.slice(last, match.index));
    const source = state.sources.findIndex((s) => s.ref === match[1]);
    const button = document.createElement("button");
    button.type = "button";
    button.className = "cite";
    button.dataset.ref = match[1];
    button.textContent = `[${source + 1}]`;
    button.title = state.sources[source]?.path || match[1];
    button.addEventListener("click", () => showSpan(match[1]));
    box.append(button);
    last = match.index + match[0].length;
  }
  box.append(text.slice(last));
}

function renderSources() {
  $("sources").replaceChildren(...state.sources.map((s) => {
    const item = document.createElement("li");
    const link = document.createElement("a");
    link.href = "#";
    link.textContent = `${s.path} (${s.span.start}–${s.span.end})`;
    link.addEventListener("click", (event) => { event.preventDefault(); showSpan(s.ref); });
    item.append(link, s.cited ? " cited" : "");
    item.className = s.cited ? "cited" : "";
    return item;
  }));
}

async function showSpan(ref) {
  const source = state.sources.find((s) => s.ref === ref);
  if (!source) return;
  const principals = principalsOf();
  try {
    const { spans } = await api("POST", `${base()}:readSpans`, {
      spans: [source.span], context_chars: 300, ...(principals ? { principals } : {}),
    });
    const span = spans[0];
    $("span-path").textContent = `${span.path} · characters ${span.start}–${span.end}`;
    const mark = document.createElement("mark");
    mark.textContent = span.text;
    $("span-text").replaceChildren(span.context_before, mark, span.context_after);
    $("span").hidden = false;
    mark.scrollIntoView({ block: "nearest" });
  } catch (err) {
    say(err.message, true);
  }
}

function principalsOf() {
  const list = $("principals").value.split(/[\s,]+/).filter(Boolean);
  return list.length ? list : null;
}

// Server-sent events of the :answer stream: delta…, then done (or error).
async function* events(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const frame = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const event = /^event: (.*)$/m.exec(frame)?.[1];
      const data = /^data: (.*)$/m.exec(frame)?.[1];
      if (event && data) yield [event, JSON.parse(data)];
    }
  }
}

// POST `body` asking for server-sent events; an error status throws its message.
async function streamed(path, body) {
  const response = await fetch(path, {
    method: "POST",
    headers: headers({ "Content-Type": "application/json", Accept: "text/event-stream" }),
    body: JSON.stringify(body),
  });
  if (!response.ok) {
    const data = await response.json().catch(() => null);
    throw new ApiError(response.status, errorText(response.status, data));
  }
  return events(response);
}

// The store's answer: /answer/stream (meta with the sources, token…, done).
async function askStore(query) {
  let text = "";
  for await (const [event, data] of await streamed("/answer/stream", { query, top_k: 5 })) {
    if (event === "token") {
      text += data.delta;
      $("answer").textContent = text;
    } else if (event === "meta" || event === "done") {
      if (event === "done") $("answer").textContent = data.answer;
      $("sources").replaceChildren(...data.sources.map((s) => {
        const item = document.createElement("li");
        item.textContent = `${s.id} (${s.label}, ${s.score.toFixed(2)}): ${s.text ?? ""}`;
        return item;
      }));
      if (event === "done") say(data.context_count ? "" : "Nothing stored matched the question.");
    } else if (event === "error") {
      throw new ApiError(0, errorText(0, data));
    }
  }
}

async function ask() {
  const query = $("question").value.trim();
  if (!inStore() && !collection()) return say("Create or pick a collection first.", true);
  if (!query) return say("Type a question.", true);
  const body = { query, effort: $("effort").value };
  const principals = principalsOf();
  if (principals) body.principals = principals;
  $("ask").disabled = true;
  $("answer").textContent = "";
  $("answer").classList.add("streaming");
  $("sources").replaceChildren();
  $("span").hidden = true;
  state.sources = [];
  say("Thinking…");
  try {
    if (inStore()) return await askStore(query);
    let text = "";
    for await (const [event, data] of await streamed(`${base()}:answer`, body)) {
      if (event === "delta") {
        text += data.text;
        $("answer").textContent = text.replace(MARKER, "").replace(PARTIAL_MARKER, "");
      } else if (event === "done") {
        state.sources = data.sources;
        renderAnswer(data.answer);
        renderSources();
        say(data.sources.some((s) => s.cited) ? "Click a marker to see the cited text." : "");
      } else if (event === "error") {
        throw new ApiError(0, errorText(0, data));
      }
    }
  } catch (err) {
    say(err.message, true);
  } finally {
    $("ask").disabled = false;
    $("answer").classList.remove("streaming");
  }
}

function init() {
  const key = $("api-key");
  key.value = localStorage.getItem("edgerag-key") || "";
  key.addEventListener("change", () => {
    localStorage.setItem("edgerag-key", key.value.trim());
    loadNamespaces();
  });
  $("namespace").addEventListener("change", () => loadCollections());
  $("collection").addEventListener("change", loadFiles);
  $("refresh").addEventListener("click", async () => {
    const picked = collection();
    await loadNamespaces();
    if (!inStore()) await loadCollections(picked);
  });
  $("create").addEventListener("click", createCollection);
  $("upload").addEventListener("click", uploadFiles);
  $("paste-upload").addEventListener("click", pasteText);
  $("ask").addEventListener("click", ask);
  $("question").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) { event.preventDefault(); ask(); }
  });
  loadHealth();
  setInterval(loadHealth, 5000);
  loadNamespaces();
}

document.addEventListener("DOMContentLoaded", init);
