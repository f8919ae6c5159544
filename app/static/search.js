// The search tab: query, top_k, mode, filters typed as key=value; ranked hits with score, title, snippet.

import { $, api, el, fmt, setStatus, state } from "./common.js";
import { barFraction, scoreKind } from "./scores.js";

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

async function runSearch(event) {
  event.preventDefault();
  const query = $("q").value.trim();
  if (!query) return;
  const body = { query, top_k: Number($("top-k").value) || 10, include: ["title", "text", "metadata"] };
  try {
    const filter = parseFilters($("filters").value);
    if (Object.keys(filter).length) body.filter = filter;
  } catch (err) {
    setStatus("search-status", err.message, "error");
    return;
  }
  if (!$("mode-wrap").hidden && $("mode").value) body.mode = $("mode").value;
  setStatus("search-status", "Searching…");
  const started = performance.now();
  try {
    const answer = await api("POST", "/search", body);
    const roundTrip = performance.now() - started;
    renderResults(answer, roundTrip, Boolean(body.mode));
  } catch (err) {
    $("results").replaceChildren();
    setStatus("search-status", err.message, "error");
  }
}

function snippet(text, limit = 280) {
  if (!text) return "";
  const flat = text.replace(/\s+/g, " ").trim();
  return flat.length > limit ? flat.slice(0, limit).replace(/\s\S*$/, "") + " …" : flat;
}

// four decimals whatever the scale (a fused 1 is "1.0000"); BM25 can pass 1000, which needs none
const scoreText = (x) => (Math.abs(x) >= 1000 ? x.toFixed(1) : x.toFixed(4));

// "hybrid (the bundle's default)" or "lexical"
function modeText(answer, asked) {
  return asked ? answer.mode : `${answer.mode} (the bundle's default)`;
}

function renderResults(answer, roundTrip, asked) {
  const hits = answer.results[0].hits;
  const t = answer.timings;
  const kind = scoreKind(answer, state.overview);
  setStatus(
    "search-status",
    `${hits.length} result${hits.length === 1 ? "" : "s"} from bundle ${answer.version} · mode ${modeText(answer, asked)}` +
      ` · encode ${fmt(t.encode_ms, 1)} ms · search ${fmt(t.search_ms, 1)} ms · server ${fmt(t.total_ms, 1)} ms` +
      ` · round trip ${fmt(roundTrip, 1)} ms`
  );
  $("score-legend").textContent = hits.length ? `Scores: ${kind.long}.` : "";
  const list = $("results");
  list.dataset.mode = answer.mode;
  list.replaceChildren(
    ...hits.map((hit) => {
      const bar = el("span", { class: "bar-fill" });
      bar.style.width = `${(100 * barFraction(hit.score, kind, hits)).toFixed(1)}%`; // CSSOM: allowed by the CSP
      return el(
        "li",
        { class: "hit" },
        el("div", { class: "hit-head" },
          el("span", { class: "score-box", title: kind.long },
            el("span", { class: "score-kind" }, kind.short),
            el("span", { class: "score" }, scoreText(hit.score)),
            el("span", { class: "bar", "aria-hidden": "true" }, bar)),
          el("span", { class: "title" }, hit.title || "(untitled)"),
          el("span", { class: "doc-id" }, hit.id)),
        el("p", { class: "snippet" }, snippet(hit.text)),
        hit.metadata && Object.keys(hit.metadata).length
          ? el("p", { class: "meta" }, Object.entries(hit.metadata).map(([k, v]) => `${k}=${JSON.stringify(v)}`).join("  "))
          : null
      );
    })
  );
  if (!hits.length) list.append(el("li", { class: "empty" }, "No document matched (check the filter)."));
  list.dataset.answered = String(Number(list.dataset.answered || 0) + 1); // lets a test wait for this answer
}

export { runSearch, parseFilters };
