// The report tab's "live traffic" card (issue 41): GET /generalization-gap's `live` section — the InfoNCE
// risk on the queries users judged since this version went live, its bootstrap interval, and the verdict
// of comparing it with the risk the report predicted for unseen queries — in words, with both intervals
// on one plot drawn here (SVG: no image to fetch, text as large as the page's own).

import { el, fmt } from "./common.js";

const SVG = "http://www.w3.org/2000/svg";
const COLORS = { predicted: "#2456c7", live: "#c2410c" }; // blue / orange: told apart in either colour scheme

function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, String(value));
  for (const child of children) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return node;
}

const interval = (x) => `${fmt(x.value)} nats, ${Math.round((x.level || 0.95) * 100)}% CI [${fmt(x.ci_low)}, ${fmt(x.ci_high)}]`;

// the verdict in words, first; `kind` colours it as the report's own verdicts are
function verdictText(live) {
  const judged = `${live.n_queries} judged quer${live.n_queries === 1 ? "y" : "ies"}`;
  if (!live.risk) {
    if (live.verdict === "no report to compare with") return ["warn", "No verdict: this bundle has no report, so there is no prediction to compare the judged traffic with."];
    return ["warn", `Not enough judgments yet: ${judged} with a relevant document, ${live.min_queries} needed before the live risk's interval is narrow enough to compare (${live.n_judgments} judgments received for this version).`];
  }
  const both = `the live risk on ${judged} is ${interval(live.risk)}; the report predicted ${interval(live.predicted)}`;
  if (live.verdict === "worse than predicted") return ["bad", `Worse than predicted: ${both}. What users ask no longer looks like what the model was trained for: a retrain that learns from the feedback would.`];
  if (live.verdict === "better than predicted") return ["ok", `Better than predicted: ${both}.`];
  return ["ok", `Consistent with the prediction: ${both}. The model does on live traffic what its report said it would.`];
}

// both 95% intervals on one axis in nats, a row each, with a legend in the page's own type size
function intervalPlot(live) {
  const rows = [["predicted", "predicted (report, held-out queries)", live.predicted]];
  if (live.risk) rows.push(["live", `live (${live.n_queries} judged queries)`, live.risk]);
  const lo = Math.min(...rows.map(([, , x]) => x.ci_low));
  const hi = Math.max(...rows.map(([, , x]) => x.ci_high));
  const pad = Math.max((hi - lo) * 0.15, 0.05);
  const [a, b] = [lo - pad, hi + pad];
  // drawn at the width it will be shown (a viewBox shrunk to a phone shrank its text to ~9 px)
  const W = Math.round(Math.max(300, Math.min(600, window.innerWidth - 60)));
  const left = 20;
  const right = W - 20;
  const x = (v) => left + ((v - a) / (b - a)) * (right - left);
  const rowY = (i) => 30 + i * 34;
  const axisY = rowY(rows.length) - 6;
  const ticks = [0, 0.25, 0.5, 0.75, 1].map((t) => a + t * (b - a));
  const H = axisY + 64 + rows.length * 22;
  const plot = svg("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, class: "interval-plot", role: "img", "aria-label": "the predicted and live risk intervals, in nats" },
    svg("title", {}, "95% intervals of the predicted and the live InfoNCE risk (nats)"),
    svg("line", { x1: left, x2: right, y1: axisY, y2: axisY, class: "axis" }),
    ...ticks.flatMap((v) => [
      svg("line", { x1: x(v), x2: x(v), y1: axisY, y2: axisY + 5, class: "axis" }),
      svg("text", { x: x(v), y: axisY + 20, "text-anchor": "middle", class: "tick" }, fmt(v, 2)),
    ]),
    svg("text", { x: (left + right) / 2, y: axisY + 40, "text-anchor": "middle", class: "tick" }, "risk R(k) = InfoNCE − log k [nats]"),
    ...rows.flatMap(([key, , e], i) => [
      svg("line", { x1: x(e.ci_low), x2: x(e.ci_high), y1: rowY(i), y2: rowY(i), stroke: COLORS[key], "stroke-width": 8, "stroke-linecap": "round", "data-interval": key }),
      svg("circle", { cx: x(e.value), cy: rowY(i), r: 7, fill: "#fff", stroke: COLORS[key], "stroke-width": 3 }),
    ]),
    ...rows.map(([key, label], i) => svg("g", { class: "legend-item", "data-legend": key },
      svg("rect", { x: left, y: axisY + 52 + i * 22, width: 16, height: 10, fill: COLORS[key] }),
      svg("text", { x: left + 24, y: axisY + 62 + i * 22, class: "legend" }, label))));
  return el("figure", { class: "live-plot" }, plot,
    el("figcaption", {}, "Each bar is a 95% interval, the dot its estimate. Overlapping bars: consistent."));
}

function liveCard(live) {
  if (!live) return null;
  const [kind, text] = verdictText(live);
  return el("div", { class: "card", id: "report-live", "data-verdict": live.verdict },
    el("h2", {}, "Live traffic against the prediction"),
    el("ul", { class: "verdicts" }, el("li", { class: kind }, text)),
    el("p", { class: "hint", id: "live-count" },
      `Rests on ${live.n_judgments} judgment${live.n_judgments === 1 ? "" : "s"} sent to POST /feedback for this version` +
        (live.risk ? `: ${live.n_anchors} (query, relevant document) pairs from ${live.n_queries} queries, k = ${live.k} random negatives each, as the report's risk_test.` : ".")),
    live.predicted ? intervalPlot(live) : null,
    live.risk ? el("p", {}, `The judged documents under the live model: MRR ${fmt(live.mrr, 3)}, nDCG@10 ${fmt(live.ndcg_at_10, 3)}.`) : null,
    el("details", {}, el("summary", {}, "The rule behind the verdict"),
      el("p", { class: "hint" }, live.rule || "95% intervals overlap: consistent; the live interval wholly above the predicted one: worse than predicted; wholly below: better than predicted.",
        ` No verdict below ${live.min_queries} judged queries: the interval would be wider than any gap the report tells apart.`)));
}

export { liveCard };
