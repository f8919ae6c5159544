// What a search score is, per mode that answered (POST /search's `mode` and `metric`), and where a score
// sits on that mode's scale (for the score bars). The formulas are the API's (app/schemas/search.py,
// contract/index/fusion.py); the fusion parameters come from GET /ui/overview's live bundle.

import { param } from "./common.js";

// the live bundle's fusion, when the answer came from it (after a swap the page may not know the new one)
function fusionOf(answer, overview) {
  const live = overview && overview.live;
  return live && live.version === answer.version ? live.fusion : null;
}

// { short: the column label, long: the sentence under the results, range: [lo, hi] or null (unbounded) }
function scoreKind(answer, overview) {
  if (answer.mode === "lexical") {
    return {
      short: "BM25",
      long: "BM25 score of the words the query shares with the document (> 0, unbounded; higher is a better match)",
      range: null,
    };
  }
  if (answer.mode === "hybrid") {
    const f = fusionOf(answer, overview);
    if (f && f.method === "convex") {
      const a = param(f.alpha);
      return {
        short: "fused",
        long: `fused score: ${a} × dense + ${param(1 - f.alpha)} × BM25, each min-max normalised over its top ${f.depth} (in [0, 1])`,
        range: [0, 1],
      };
    }
    if (f) {
      return {
        short: "fused",
        long: `fused score (reciprocal rank fusion): Σ 1/(${param(f.rrf_k)} + rank) over the dense and BM25 top ${f.depth} (at most ${(2 / (f.rrf_k + 1)).toFixed(4)})`,
        range: [0, 2 / (f.rrf_k + 1)],
      };
    }
    return { short: "fused", long: "fused score of the dense and BM25 rankings (higher is better)", range: null };
  }
  if (answer.metric === "aninfonce") {
    return {
      short: "AnInfoNCE",
      long: "the model's AnInfoNCE similarity −½‖√Λ(u − v)‖² (≤ 0; 0 = identical)",
      range: null,
    };
  }
  return { short: "cosine", long: "the model's cosine similarity (in [−1, 1]; higher is more similar)", range: [0, 1] };
}

// a score's share of its bar in [0, 1]: on the mode's own scale where it has one, else relative to the
// best and worst hit of this page (BM25 and AnInfoNCE are unbounded)
function barFraction(score, kind, hits) {
  let lo, hi;
  if (kind.range) [lo, hi] = kind.range;
  else {
    const all = hits.map((h) => h.score);
    hi = Math.max(...all);
    lo = Math.min(0, ...all);
    if (kind.short === "AnInfoNCE") lo = Math.min(...all) * 1.05;
  }
  if (!(hi > lo)) return 1;
  return Math.min(1, Math.max(0, (score - lo) / (hi - lo)));
}

export { scoreKind, barFraction };
