// One page of search hits: the mode that answered and what its scores are (scores.js), a score bar per
// hit, the query's words marked in lexical and hybrid hits, and the document view (GET /documents/{id}).

import { $, api, el, fmt, setStatus, state } from "./common.js";
import { barFraction, scoreKind } from "./scores.js";
import { judgeControls } from "./feedback.js";

// four decimals whatever the scale (a fused 1 is "1.0000"); BM25 can pass 1000, which needs none
const scoreText = (x) => (Math.abs(x) >= 1000 ? x.toFixed(1) : x.toFixed(4));

// -- matched terms --------------------------------------------------------------------------------------
// The server's BM25 analyser (contract/index/lexical_index.py) lower-cases, keeps words of 2+ letters,
// drops English stop words and applies the Snowball stemmer. The page approximates it: the same words and
// a light suffix stripper (below), so "fractures" marks "fracture"; a word Snowball stems differently may
// go unmarked. The marks only show where BM25 matched; the ranking is the server's.
const STOP = new Set(("a an and are as at be but by for if in into is it no not of on or such that the their " +
  "then there these they this to was will with what which who whom why how does do did has have had " +
  "from can could would should than its our we you your").split(" "));
const WORD = /[\p{L}\p{N}_]{2,}/gu;

function stem(word) {
  const w = word.toLowerCase();
  for (const suffix of ["ational", "ization", "ations", "ation", "ments", "ment", "ness", "ings", "ing", "edly", "ies", "ied", "es", "ed", "ly", "s", "e"]) {
    if (w.length - suffix.length >= 3 && w.endsWith(suffix)) return w.slice(0, -suffix.length);
  }
  return w;
}

function queryTerms(query) {
  return new Set((query.toLowerCase().match(WORD) || []).filter((w) => !STOP.has(w)).map(stem));
}

// text with the words whose stem is a query term wrapped in <mark> (DOM nodes, never innerHTML)
function marked(text, terms) {
  if (!terms || !terms.size) return [text];
  const out = [];
  let last = 0;
  for (const m of text.matchAll(WORD)) {
    if (STOP.has(m[0].toLowerCase()) || !terms.has(stem(m[0]))) continue;
    out.push(text.slice(last, m.index), el("mark", {}, m[0]));
    last = m.index + m[0].length;
  }
  out.push(text.slice(last));
  return out;
}

function snippet(text, terms, limit = 280) {
  if (!text) return "";
  const flat = text.replace(/\s+/g, " ").trim();
  if (flat.length <= limit) return flat;
  // start near the first matched word, so the snippet shows why the hit matched
  let start = 0;
  if (terms && terms.size) {
    for (const m of flat.matchAll(WORD)) {
      if (terms.has(stem(m[0])) && !STOP.has(m[0].toLowerCase())) { start = m.index > limit / 2 ? m.index - 60 : 0; break; }
    }
  }
  let cut = flat.slice(start, start + limit).replace(/\s\S*$/, "");
  if (start > 0) cut = "… " + cut.replace(/^\S*\s/, "");
  return cut + (start + limit < flat.length ? " …" : "");
}

// -- a page of hits -------------------------------------------------------------------------------------
function renderResults(answer, roundTrip, body) {
  const hits = answer.results[0].hits;
  const t = answer.timings;
  const kind = scoreKind(answer, state.overview);
  const terms = answer.mode === "dense" ? null : queryTerms(body.query);
  const offset = body.offset || 0;
  setStatus(
    "search-status",
    `${hits.length} result${hits.length === 1 ? "" : "s"} from bundle ${answer.version} · mode ${answer.mode}${body.mode ? "" : " (the bundle's default)"}` +
      ` · encode ${fmt(t.encode_ms, 1)} ms · search ${fmt(t.search_ms, 1)} ms · server ${fmt(t.total_ms, 1)} ms` +
      ` · round trip ${fmt(roundTrip, 1)} ms`
  );
  $("score-legend").textContent = hits.length
    ? `Scores: ${kind.long}.` + (terms ? " Marked: the query's words (stop words aside) as BM25 matches them, approximately." : "")
    : "";
  const list = $("results");
  list.dataset.mode = answer.mode;
  const shown = { query: body.query, searchId: answer.results[0].search_id }; // what a judgment refers to
  list.replaceChildren(
    ...hits.map((hit, i) => {
      const bar = el("span", { class: "bar-fill" });
      bar.style.width = `${(100 * barFraction(hit.score, kind, hits)).toFixed(1)}%`;
      return el(
        "li",
        { class: "hit", "data-id": hit.id },
        el("div", { class: "hit-head" },
          el("span", { class: "rank" }, `${offset + i + 1}.`), // ranks go on across pages
          el("span", { class: "score-box", title: kind.long },
            el("span", { class: "score-kind" }, kind.short),
            el("span", { class: "score" }, scoreText(hit.score)),
            el("span", { class: "bar", "aria-hidden": "true" }, bar)),
          el("span", { class: "title" }, marked(hit.title || "(untitled)", terms)),
          el("button", { class: "link doc-id", title: "Open the whole document (GET /documents/{id})", onclick: () => openDocument(hit.id, terms) }, hit.id)),
        el("p", { class: "snippet" }, marked(snippet(hit.text, terms), terms)),
        metaLine(hit.metadata),
        judgeControls(hit, shown)
      );
    })
  );
  if (!hits.length) list.append(el("li", { class: "empty" }, offset ? "No more results." : "No document matched (check the filter)."));
  list.dataset.answered = String(Number(list.dataset.answered || 0) + 1); // lets a test wait for this answer
}

// a hit's metadata as key=value, or nothing at all: a document without metadata (null, {}) or a field
// without a value shows no line and no "null" (issue 44)
function metaFields(metadata) {
  return Object.entries(metadata || {}).filter(([, v]) => v !== null && v !== undefined);
}

function metaLine(metadata) {
  const fields = metaFields(metadata);
  return fields.length ? el("p", { class: "meta" }, fields.map(([k, v]) => `${k}=${JSON.stringify(v)}`).join("  ")) : null;
}

// -- the document view ----------------------------------------------------------------------------------
async function openDocument(id, terms) {
  const box = $("doc-view");
  const body = $("doc-body");
  body.replaceChildren(el("p", { class: "status" }, "Loading…"));
  if (!box.open) box.showModal();
  try {
    const doc = await api("GET", `/documents/${encodeURIComponent(id)}`);
    const meta = metaFields(doc.metadata);
    body.replaceChildren(
      el("h2", {}, marked(doc.title || "(untitled)", terms)),
      el("p", { class: "doc-id" }, `${doc.id} · bundle ${doc.version}${doc.seq !== null && doc.seq !== undefined ? ` · written through the API (seq ${doc.seq})` : ""}`),
      el("p", { class: "doc-text" }, marked(doc.text, terms)),
      // replaceChildren writes a null argument as the text "null" (issue 44): no metadata adds nothing
      ...(meta.length ? [el("dl", { class: "facts" }, meta.map(([k, v]) => [el("dt", {}, k), el("dd", {}, JSON.stringify(v))]))] : []));
  } catch (err) {
    body.replaceChildren(el("p", { class: "status error" }, err.message));
  }
  box.dataset.loaded = id;
}

export { renderResults, queryTerms, stem };
