// The dense and BM25 parts of each hybrid hit's fused score. The API returns the fused score only, so the
// page asks for the two lists hybrid fused (the same query, filter and depth, in modes dense and lexical)
// and recomputes each hit's two terms with the bundle's fusion (contract/index/fusion.py):
//   RRF: 1/(k + rank in the dense list) + 1/(k + rank in the BM25 list), 0 for a list it is not in;
//   convex: α·minmax(dense score) + (1 − α)·minmax(BM25 score) over each list's candidates.
// Their sum is the fused score the server returned (float32 rounding aside); a hit whose parts do not add
// up (a document written between the requests) shows no split.

import { api, el, state } from "./common.js";

const SPLIT_TOLERANCE = 1e-6; // float32 rounding of scores ≤ 1 is below 1e-7; one rank off in RRF is above 1e-5

function minMax(scores) {
  const lo = Math.min(...scores);
  const hi = Math.max(...scores);
  return (s) => (hi === lo ? 1 : (s - lo) / (hi - lo));
}

// {id: [dense part, BM25 part]} for the ids of one fused list, from the two lists it fused
function parts(dense, lexical, fusion) {
  const out = {};
  const add = (id, side, value) => { (out[id] ||= [0, 0])[side] += value; };
  if (fusion.method === "convex") {
    const nd = minMax(dense.map((h) => h.score));
    const nl = minMax(lexical.map((h) => h.score));
    dense.forEach((h) => add(h.id, 0, fusion.alpha * nd(h.score)));
    lexical.forEach((h) => add(h.id, 1, (1 - fusion.alpha) * nl(h.score)));
  } else {
    dense.forEach((h, i) => add(h.id, 0, 1 / (fusion.rrf_k + i + 1)));
    lexical.forEach((h, i) => add(h.id, 1, 1 / (fusion.rrf_k + i + 1)));
  }
  return out;
}

async function showSplit(answer, body, kind) {
  const live = state.overview && state.overview.live;
  if (answer.mode !== "hybrid" || !live || live.version !== answer.version || !live.fusion) return;
  const fusion = live.fusion;
  const depth = Math.max((body.offset || 0) + body.top_k, fusion.depth); // as retrieval_modes.depth
  const list = document.getElementById("results");
  if (depth > state.overview.max_top_k) {
    list.dataset.split = "too-deep";
    return;
  }
  const ask = (mode) => api("POST", "/search", { query: body.query, top_k: depth, mode, ...(body.filter ? { filter: body.filter } : {}) });
  let dense, lexical;
  try {
    [dense, lexical] = await Promise.all([ask("dense"), ask("lexical")]);
  } catch (_) {
    list.dataset.split = "failed";
    return;
  }
  const byId = parts(dense.results[0].hits, lexical.results[0].hits, fusion);
  const [lo, hi] = kind.range || [0, 1];
  for (const item of list.querySelectorAll("li.hit")) {
    const hit = answer.results[0].hits.find((h) => h.id === item.dataset.id);
    const p = byId[item.dataset.id];
    if (!hit || !p || Math.abs(p[0] + p[1] - hit.score) > SPLIT_TOLERANCE) continue;
    item.dataset.dense = String(p[0]);
    item.dataset.lexical = String(p[1]);
    const bar = item.querySelector(".bar");
    const seg = (cls, value) => {
      const s = el("span", { class: `bar-fill ${cls}` });
      s.style.width = `${(100 * Math.max(0, value) / (hi - lo)).toFixed(1)}%`; // CSSOM: allowed by the CSP
      return s;
    };
    bar.classList.add("split-bar");
    bar.replaceChildren(seg("dense", p[0]), seg("lexical", p[1]));
    const share = p[0] + p[1] > 0 ? Math.round((100 * p[0]) / (p[0] + p[1])) : 0;
    item.querySelector(".score-box").append(el("span", { class: "split", title: `dense ${p[0].toFixed(4)} + BM25 ${p[1].toFixed(4)}` }, `dense ${share}% · BM25 ${100 - share}%`));
  }
  list.dataset.split = "shown";
  document.getElementById("score-legend").append(" Bars: the dense part (blue) and the BM25 part (amber) of each fused score, recomputed here from the two lists hybrid fused.");
}

export { showSplit };
