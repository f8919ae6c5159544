// The search tab: query, top_k, mode, filters typed as key=value; pages of hits (offset), the search kept
// in the URL (#search?q=…&mode=…&top_k=…&offset=…&filter=…: a reload or a shared link runs it again) and
// the same request as a curl command. results.js draws the hits.

import { $, api, el, scoped, setStatus, state } from "./common.js";
import { renderResults } from "./results.js";
import { showSplit } from "./split.js";
import { scoreKind } from "./scores.js";

const SLOW_MS = 1500; // a warm search answers in tens of ms; past this the page says why it waits

// -- search -------------------------------------------------------------------------------------------
function parseValue(text) {
  const t = text.trim();
  if (t === "true") return true;
  if (t === "false") return false;
  if (t !== "" && !Number.isNaN(Number(t))) return Number(t);
  return t;
}

// "year>=2010, group=a|b, even=true" -> {"year": {"gte": 2010}, "group": ["a", "b"], "even": true}
function parseFilters(text) {
  const filter = {};
  for (const part of text.split(",").map((p) => p.trim()).filter(Boolean)) {
    const m = part.match(/^([A-Za-z_][A-Za-z0-9_.\-]*)\s*(>=|<=|>|<|=)\s*(.*)$/);
    if (!m) throw new Error(`filter "${part}": write key=value, key=a|b, key>=n or key<n`);
    const [, key, op, raw] = m;
    if (op === "=") {
      const values = raw.split("|").map(parseValue);
      filter[key] = values.length > 1 ? values : values[0];
    } else {
      const n = Number(raw);
      if (raw.trim() === "" || Number.isNaN(n)) throw new Error(`filter "${part}": ${op} needs a number`);
      const name = { ">=": "gte", "<=": "lte", ">": "gt", "<": "lt" }[op];
      const cond = typeof filter[key] === "object" && !Array.isArray(filter[key]) ? filter[key] : {};
      cond[name] = n;
      filter[key] = cond;
    }
  }
  return filter;
}

// the search form as URL parameters (what a reload restores); the API key is never among them
function formParams() {
  const p = new URLSearchParams();
  p.set("q", $("q").value.trim());
  if ($("mode").value) p.set("mode", $("mode").value);
  p.set("top_k", String(Number($("top-k").value) || 10));
  if ($("filters").value.trim()) p.set("filter", $("filters").value.trim());
  if (state.collection !== "default") p.set("collection", state.collection);
  return p;
}

// the request body of a search given as URL parameters (a thrown Error names what is wrong)
function bodyOf(params) {
  const body = { query: params.get("q"), top_k: Number(params.get("top_k")) || 10, include: ["title", "text", "metadata"] };
  const offset = Number(params.get("offset")) || 0;
  if (offset > 0) body.offset = offset;
  const filter = parseFilters(params.get("filter") || "");
  if (Object.keys(filter).length) body.filter = filter;
  if (params.get("mode")) body.mode = params.get("mode");
  return body;
}

function curlOf(body) {
  const json = JSON.stringify(body).replace(/'/g, "'\\''"); // a quote inside single quotes, for sh
  const url = new URL(scoped("/search"), location.href).href;
  return `curl -sS -X POST '${url}' -H 'content-type: application/json' -d '${json}'`;
}

async function runSearch(event) {
  event.preventDefault();
  if (!$("q").value.trim()) return;
  await search(formParams());
}

// run the search the parameters describe, put it in the URL, draw its page of hits and the pager
async function search(params) {
  let body;
  try {
    body = bodyOf(params);
  } catch (err) {
    setStatus("search-status", err.message, "error");
    return;
  }
  state.search = params;
  history.replaceState(null, "", `#search?${params}`);
  $("curl").textContent = curlOf(body);
  $("curl-box").hidden = false;
  // a collection's first search loads its encoder and index (21 s on the demo's 2 cores, issue 44): say so
  const name = state.collection;
  const cold = state.unloaded && state.unloaded.has(name);
  setStatus("search-status", cold ? `Loading collection ${name}: its first search reads its encoder and index into memory (20 s or more), later ones take milliseconds…` : "Searching…", cold ? "loading" : "");
  const slow = cold ? null : setTimeout(() => setStatus("search-status", "Still searching: the first search after the server starts, or on a collection not loaded yet, loads its encoder and index first (20 s or more)…", "loading"), SLOW_MS);
  const started = performance.now();
  try {
    const answer = await api("POST", "/search", body);
    renderResults(answer, performance.now() - started, body);
    $("results").dataset.split = "pending";
    showSplit(answer, body, scoreKind(answer, state.overview)); // hybrid only; fills in when its lists arrive
    renderPager(body, answer.results[0].hits.length);
  } catch (err) {
    $("results").replaceChildren();
    $("pager").hidden = true;
    setStatus("search-status", err.message, "error");
  } finally {
    clearTimeout(slow);
    if (state.unloaded) state.unloaded.delete(name); // loaded now (or refused for a reason the status says)
  }
}

function renderPager(body, shown) {
  const offset = body.offset || 0;
  const limit = state.overview ? state.overview.max_top_k : Infinity;
  const deepest = offset + 2 * body.top_k;
  const prev = $("prev-page");
  const next = $("next-page");
  prev.disabled = offset === 0;
  // a short page is the last; a next page past SEARCH_MAX_TOP_K would be refused (offset + top_k)
  next.disabled = shown < body.top_k || deepest > limit;
  next.title = deepest > limit ? `this server answers ranks up to ${limit} (SEARCH_MAX_TOP_K)` : "";
  $("page-info").textContent = shown ? `results ${offset + 1}–${offset + shown}` : `nothing from rank ${offset + 1}`;
  $("pager").hidden = false;
}

function turnPage(direction) {
  const params = new URLSearchParams(state.search);
  const top = Number(params.get("top_k")) || 10;
  params.set("offset", String(Math.max(0, (Number(params.get("offset")) || 0) + direction * top)));
  if (params.get("offset") === "0") params.delete("offset");
  search(params);
}

// on load: the search in the URL, if any, fills the form and runs
function restoreSearch() {
  const hash = location.hash;
  const at = hash.indexOf("?");
  if (!hash.startsWith("#search") || at < 0) return false;
  const params = new URLSearchParams(hash.slice(at + 1));
  if (!params.get("q")) return false;
  const collection = params.get("collection") || "default";
  if (collection !== state.collection) {
    state.collection = collection; // the selector follows (on load, when the collections are listed)
    const select = $("collection");
    if ([...select.options].some((o) => o.value === collection)) select.value = collection;
  }
  $("q").value = params.get("q");
  $("top-k").value = params.get("top_k") || "10";
  $("filters").value = params.get("filter") || "";
  const mode = params.get("mode") || "";
  if (![...$("mode").options].some((o) => o.value === mode)) $("mode").append(el("option", { value: mode }, mode));
  $("mode").value = mode;
  search(params);
  return true;
}

async function copyCurl() {
  const text = $("curl").textContent;
  $("curl-box").hidden = false;
  $("curl-box").open = true;
  try {
    await navigator.clipboard.writeText(text);
    $("copy-curl").textContent = "Copied";
  } catch (_) {
    $("copy-curl").textContent = "Select it below"; // no clipboard outside a secure context
  }
  setTimeout(() => { $("copy-curl").textContent = "Copy as curl"; }, 2000);
}

function setUpSearch() {
  $("search-form").addEventListener("submit", runSearch);
  $("prev-page").addEventListener("click", () => turnPage(-1));
  $("next-page").addEventListener("click", () => turnPage(1));
  $("copy-curl").addEventListener("click", copyCurl);
  $("doc-close").addEventListener("click", () => $("doc-view").close());
}

// a search link pasted into the address bar of an open tab changes only the hash: run it (issue 44); the
// page's own history.replaceState fires no hashchange, so a search never runs twice
function followSearchLink() {
  const at = location.hash.indexOf("?");
  if (!location.hash.startsWith("#search") || at < 0) return;
  const params = new URLSearchParams(location.hash.slice(at + 1));
  if (String(params) !== String(state.search || "")) restoreSearch();
}

// switching back to the search tab puts its search back in the URL
function searchHash() {
  return state.search ? `#search?${state.search}` : "#search";
}

export { setUpSearch, restoreSearch, searchHash, parseFilters, followSearchLink };
