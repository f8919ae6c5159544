// The gap-report tab: GET /generalization-gap rendered for people, one sentence per number (the
// sentences follow docs/gap-report.md), with the bundle's PNG plots.

import { $, api, el, fmt, param, scoped, state, when } from "./common.js";
import { liveCard } from "./live.js";

// -- report (sentences from docs/gap-report.md) ------------------------------------------------------
function valueNode(x, unit = "nats") {
  if (!x) return el("span", { class: "na" }, "—");
  if (x.kind === "not_computable") return el("span", { class: "na" }, "not computable");
  if (x.kind === "estimate") {
    return el("span", { title: x.method },
      el("b", {}, fmt(x.value)), ` ${unit}`,
      el("span", { class: "ci" }, ` ${Math.round((x.level || 0.95) * 100)}% CI [${fmt(x.ci_low)}, ${fmt(x.ci_high)}]`));
  }
  const tag = x.kind === "term" ? "term, not a bound" : "bound";
  // a bound of 10^32 nats is vacuous many times over: say what so large a number means, not just print it
  const huge = Math.abs(x.value) >= 1e6 ? el("span", { class: "ci" }, x.kind === "term" ? " (so large that a bound built on it says nothing)" : " (so large it says nothing)") : null;
  return el("span", { title: x.assumptions },
    el("b", {}, fmt(x.value)), ` ${unit} `, el("span", { class: "kind" }, tag), huge,
    x.vacuous ? el("span", { class: "badge bad", title: "exceeds log(k+1): it constrains nothing" }, "vacuous") : null);
}

function row(name, value, meaning, unit = "nats") {
  const why = [meaning];
  if (value && value.kind === "not_computable") why.push(el("span", { class: "reason" }, ` Not computable: ${value.reason}`));
  return el("tr", {}, el("th", { scope: "row" }, name), el("td", { class: "value" }, valueNode(value, unit)), el("td", {}, why));
}

function table(...rows) {
  return el("div", { class: "scroll" }, el("table", { class: "grid report" },
    el("thead", {}, el("tr", {}, el("th", {}, "quantity"), el("th", {}, "value"), el("th", {}, "what it means"))),
    el("tbody", {}, rows)));
}

// a plot, shrunk to the card; a click (or Enter) opens it at its own size in a dialog, where its legend
// is as legible as the PNG was drawn (shrunk to a phone's width it was ~5 px, issue 44)
function plotFigure(version, report, name, caption) {
  if (!report.plots.includes(name)) return null;
  const src = scoped(`/bundles/${encodeURIComponent(version)}/plots/${encodeURIComponent(name)}`);
  return el("figure", {},
    el("button", { type: "button", class: "plot-open", title: "Open full size", onclick: () => openPlot(src, caption, name) },
      el("img", { src, alt: caption, "data-plot": name, loading: "eager" })),
    el("figcaption", {}, caption, " ", el("span", { class: "hint" }, "(click to open full size)")));
}

function openPlot(src, caption, name) {
  const box = $("plot-view");
  $("plot-body").replaceChildren(el("img", { src, alt: caption, "data-plot": name }), el("p", { class: "hint" }, caption));
  box.showModal();
}

// The report's own strings (reasons, notes, methods) are written by the training side and may carry
// LaTeX (e^{s/τ}); a page shows it in plain notation: e^{x} → exp(x), ^{x} → ^(x), _{x} → _x, \tau → τ.
const SYMBOLS = { tau: "τ", infty: "∞", sqrt: "√", leq: "≤", geq: "≥", le: "≤", ge: "≥", cdot: "·", lambda: "λ", Lambda: "Λ", mu: "μ", delta: "δ", epsilon: "ε", log: "log", exp: "exp", approx: "≈", sum: "Σ" };

function plain(text) {
  return text
    .replace(/\\([A-Za-z]+)/g, (m, name) => SYMBOLS[name] ?? name)
    .replace(/\be\^\{([^{}]*)\}/g, "exp($1)")
    .replace(/\^\{([^{}]*)\}/g, "^($1)")
    .replace(/_\{([^{}]*)\}/g, "_$1")
    .replace(/\b\d+(?:\.\d+)?e[+-]\d+\b/g, (m) => fmt(Number(m))); // 1.21e+03 → 1210, 2.23e+32 → 2.2 × 10³²
}

function plainText(root) {
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (/[\\^_]\{|\\[A-Za-z]|\de[+-]\d/.test(node.nodeValue)) node.nodeValue = plain(node.nodeValue);
  }
  for (const node of root.querySelectorAll("[title]")) node.title = plain(node.title); // hover texts too
}

// why R(k) is often below zero, said wherever a risk is shown
const NEGATIVE_RISK = "A negative risk is normal, not an error: the − log k shifts the InfoNCE loss so that a model that " +
  "cannot tell the positive from the k negatives scores about log((k+1)/k) ≈ 0, and every model better than that scores below 0.";

// -- the verdict: plain words first, each derived from the report's numbers by the rule shown under it --
// (docs/gap-report.md, "Reading the verdict", writes the same rule down)
const WIDE_CI_NATS = 0.25; // a gap CI wider than this (nats) cannot tell a small gap from none

function verdictLines(r) {
  const lines = [];
  const g = r.gap;
  const ci = `(${fmt(g.value)} nats, ${Math.round((g.level || 0.95) * 100)}% CI [${fmt(g.ci_low)}, ${fmt(g.ci_high)}])`;
  if (g.ci_low > 0) {
    lines.push(["bad", `The model does measurably worse on queries it never saw ${ci}: it overfits its training queries. Train on more queries, for fewer epochs, or stop on the validation split.`]);
  } else if (g.ci_high < 0) {
    lines.push(["ok", `No overfitting: the held-out risk is even lower than the training risk ${ci}, a sampling effect of which queries landed in each split.`]);
  } else {
    const wide = g.ci_high - g.ci_low > WIDE_CI_NATS;
    lines.push([wide ? "warn" : "ok", `No gap detectable at this sample size: the model generalizes as far as ${r.n_test_queries} held-out queries can tell ${ci}.` +
      (wide ? ` The interval is wider than ${WIDE_CI_NATS} nats, so a small gap would go unseen: more held-out queries would tighten it.` : "")]);
  }
  const ks = r.k_sufficient;
  if (ks.k === null || ks.k === undefined) {
    lines.push(["warn", `Train with more negatives, if you can: the risk still falls with k across the whole grid (up to k = ${r.risk_vs_k.length ? r.risk_vs_k[r.risk_vs_k.length - 1].k : "?"}), so this report cannot say how many are enough.`]);
  } else if (r.k < ks.k) {
    lines.push(["warn", `Train with more negatives: training used k = ${r.k} per query, and the risk keeps falling by more than ${ks.eps} nats until k = ${ks.k} (a larger batch, or extra random or mined negatives).`]);
  } else {
    lines.push(["ok", `Enough negatives: training used k = ${r.k} ≥ ${ks.k}, beyond which more change the risk by less than ${ks.eps} nats.`]);
  }
  const rt = r.retrieval;
  if (rt && rt.ndcg_at_10_gap) {
    const n = rt.ndcg_at_10_gap;
    const drop = `nDCG@10 ${fmt(rt.train.ndcg_at_10, 3)} on training queries, ${fmt(rt.test.ndcg_at_10, 3)} held out`;
    if (n.ci_low > 0) lines.push(["bad", `Search quality drops on new queries (${drop}; the gap's CI [${fmt(n.ci_low)}, ${fmt(n.ci_high)}] excludes 0).`]);
    else lines.push(["ok", `Search quality holds on new queries (${drop}; the gap's CI [${fmt(n.ci_low)}, ${fmt(n.ci_high)}] contains 0 or lies below it).`]);
  }
  return lines;
}

function verdictCard(r) {
  return el("div", { class: "card verdict-card", id: "verdict" },
    el("h2", {}, "Verdict"),
    el("ul", { class: "verdicts" }, verdictLines(r).map(([kind, text]) => el("li", { class: kind }, text))),
    el("details", {}, el("summary", {}, "The rule behind these sentences"),
      el("ul", { class: "hint" },
        el("li", {}, "Gap (held-out − training risk): its 95% CI above 0 → overfits; below 0 → no overfitting; containing 0 → no gap detectable, flagged when the CI is wider than " + WIDE_CI_NATS + " nats."),
        el("li", {}, "Negatives: training k below k_sufficient, or k_sufficient not reached within the grid → train with more negatives; else enough."),
        el("li", {}, "Search quality: the train − test nDCG@10 gap's CI above 0 → drops on new queries; else holds."),
        el("li", {}, "Every number below keeps its label, unit (nats) and interval; the sentences only read them."))));
}

function gapVerdict(gap) {
  if (gap.ci_low > 0) return "The held-out risk is measurably higher than the training risk (the CI excludes 0): the model fits its training queries better than new ones.";
  if (gap.ci_high < 0) return "The held-out risk is measurably lower than the training risk (the CI excludes 0).";
  return "No gap is detectable at this sample size (the CI contains 0).";
}

function kAdvice(r) {
  const ks = r.k_sufficient;
  if (ks.k === null || ks.k === undefined) {
    return `k_sufficient is not reached within the grid${ks.reason ? ": " + ks.reason : ""}. Use the plug-in CE∞ as the k → ∞ risk; this report cannot say how many negatives are enough.`;
  }
  const ci = `(${Math.round((ks.level || 0.95) * 100)}% interval ${ks.ci_low ?? "not reached"} to ${ks.ci_high ?? "not reached"})`;
  if (r.k >= ks.k) return `Training used k = ${r.k} ≥ k_sufficient = ${ks.k} ${ci}: more negatives per query would change the risk by less than ${ks.eps} nats.`;
  return `Training used k = ${r.k} < k_sufficient = ${ks.k} ${ci}: more negatives per query (a larger batch, extra random or mined negatives) should still lower the risk by more than ${ks.eps} nats.`;
}

async function loadReport() {
  const box = $("report");
  let answer;
  try {
    answer = await api("GET", "/generalization-gap");
  } catch (err) {
    box.replaceChildren(el("p", { class: "status error" }, err.message));
    return;
  }
  const live = liveCard(answer.live); // judgments arrive at any time: redrawn on every visit
  if (state.reportVersion === answer.version && box.dataset.rendered) {
    if (live && $("report-live")) $("report-live").replaceWith(live);
    plainText(box);
    return;
  }
  state.reportVersion = answer.version;
  let entry = null; // the bundle's per-mode metrics, from its manifest (GET /bundles)
  try {
    const listing = await api("GET", "/bundles?gate_limit=1");
    entry = listing.versions.find((v) => v.version === answer.version) || null;
  } catch (_) {
    entry = null; // the report stands without them
  }
  const cards = renderReport(answer.version, answer.report);
  if (live) cards.splice(1, 0, live); // right under the verdict: it says whether that verdict still holds
  const modes = modesCard(entry);
  if (modes) cards.splice(cards.length - (answer.report.notes && answer.report.notes.length ? 1 : 0), 0, modes);
  box.replaceChildren(...cards);
  plainText(box);
  box.dataset.rendered = "1";
}

// nDCG@10, recall@10 and MRR@10 on the held-out test queries for each search mode, as the bundle's
// manifest records them (training/hybrid/lexical_step.py); null for a bundle without them
function modesCard(entry) {
  const modes = ["dense", "lexical", "hybrid"].filter((m) => entry && entry.metrics[`test.${m}`]);
  if (!modes.length) return null;
  const def = entry.retrieval ? entry.retrieval.default_mode : "dense";
  const four = (x) => (typeof x === "number" ? x.toFixed(4) : "—"); // 1 reads 1.0000, like its neighbours
  const cell = (m, key, label) => el("td", { class: "num", "data-label": label }, four(entry.metrics[`test.${m}`][key]));
  return el("div", { class: "card", id: "report-modes" },
    el("h2", {}, "Retrieval quality per search mode, held-out queries"),
    el("div", { class: "scroll" }, el("table", { class: "grid report" },
      el("thead", {}, el("tr", {}, ["mode", "nDCG@10", "recall@10", "MRR@10", "what it means"].map((h) => el("th", {}, h)))),
      el("tbody", {}, modes.map((m) => el("tr", { "data-mode": m },
        el("th", { scope: "row" }, m, m === def ? el("span", { class: "badge ok" }, "default") : null),
        cell(m, "ndcg@10", "nDCG@10"), cell(m, "recall@10", "recall@10"), cell(m, "mrr@10", "MRR@10"),
        el("td", {}, m === def ? "What POST /search answers with when no mode is asked for: the best on validation queries." :
          "Asked for with mode=" + m + ".")))))),
    el("p", { class: "hint" }, "From the bundle's manifest, measured when it was indexed on the same held-out queries as the gate."));
}

function renderReport(version, r) {
  const tau = r.model.temperature;
  const head = el("div", { class: "card" },
    el("h2", {}, `Generalization gap of bundle ${version}`),
    el("p", { id: "report-lead" }, `Model ${r.model.name}: how well what it learned from ${r.n_train_split_queries} training queries carries over to ${r.n_test_queries} it never saw` +
      (r.n_train_split_queries !== r.n_train_queries ? ` (the training side scored here is a seeded sample of ${r.n_train_queries} of them).` : ".")),
    el("details", {}, el("summary", {}, "How this report was measured"), el("p", {},
      `Model ${r.model.name} (${r.model.metric}, τ = ${param(tau)}${r.model.temperature_effective !== tau ? `, τ_eff = ${param(r.model.temperature_effective)}` : ""}). `,
      `k = ${r.k} negatives per anchor (${r.k_rule}); negatives: ${r.negative_sampler}. `,
      `${r.n_train} training anchors from ${r.n_train_queries} queries, ${r.n_test} held-out anchors from ${r.n_test_queries} queries; `,
      `pool of ${r.pool_size} documents; seed ${r.seed}; ${r.n_bootstrap} bootstrap replicates; written ${when(r.created_at)}.`)),
    el("p", { class: "hint" },
      "Every number is in nats and says its kind: an estimate has a confidence interval, a bound holds under stated assumptions " +
      "(vacuous when it exceeds log(k+1), i.e. it constrains nothing), a term is one computable part of a bound, " +
      "and a quantity that cannot be evaluated says why instead of showing a number."));

  const gap = el("div", { class: "card" },
    el("h2", {}, "The gap"),
    el("p", { class: "verdict" }, gapVerdict(r.gap)),
    table(
      row("gap", r.gap, "Held-out risk minus training risk (R_test − R_train): how much worse the model does on queries it never saw. Bootstrap CI, queries resampled within each split."),
      row("risk_train", r.risk_train, `R(k, τ) = mean InfoNCE − log k of the final model on a sample of training queries, with k random negatives from the corpus (never mined ones). ${NEGATIVE_RISK}`),
      row("risk_test", r.risk_test, "The same risk on the held-out queries."),
      row("hoeffding_halfwidth", r.hoeffding_halfwidth, `(4/τ)·√(log(2/δ)/2n) with n = ${r.n_test_queries} held-out queries: a distribution-free guarantee on how far the held-out risk can be from its estimate (δ = ${r.delta}); loose at small τ.`)),
    plotFigure(version, r, "train_vs_test.png", "Training vs held-out risk at the training k, with 95% CIs."));

  const fit = r.fit;
  const kRows = r.risk_vs_k.map((p) =>
    el("tr", {}, el("td", { class: "num" }, p.k), el("td", {}, valueNode(p.risk)), el("td", {}, valueNode(p.delta))));
  const curve = el("div", { class: "card" },
    el("h2", {}, "Risk versus the number of negatives k"),
    plotFigure(version, r, "risk_vs_k.png", "R̂(k) on held-out anchors with its CI, the a + b/k fit and CE∞ (plug-in)."),
    el("p", {}, `The grid of k: ${r.k_grid_rule}. The theory (Whiteley 2026, arXiv 2607.09405) says R(k) approaches CE∞, the cross-entropy of softmax search over the whole corpus, like a + b/k.`),
    table(
      el("tr", {}, el("th", { scope: "row" }, "fit a + b/k"),
        el("td", { class: "value" }, el("b", {}, `a = ${fmt(fit.a)}, b = ${fmt(fit.b)}`), ` R² ${fmt(fit.r2, 3)}`,
          fit.accepted ? el("span", { class: "badge ok" }, "accepted") : el("span", { class: "badge bad" }, "not accepted")),
        el("td", {}, `Weighted fit on k ∈ [${fit.k_range[0]}, ${fit.k_range[1]}] (${fit.n_points} points): the widest range where R̂ is linear in 1/k starting at k ≥ d1. ` +
          (fit.accepted ? "Accepted: R̂(k) is in the 1/k regime there, so its intercept estimates CE∞." :
            "Not accepted: R̂(k) is not in the 1/k regime within the grid, so the intercept is no estimate."))),
      row("ce_inf_fit", r.ce_inf_fit, "CE∞ as the intercept a of the fit, with a bootstrap CI: only when the fit is accepted."),
      row("ce_inf_plugin", r.ce_inf_plugin, "CE∞ computed directly against the whole pool: the k → ∞ risk for negatives drawn from this corpus. The number to use when the fit is not accepted."),
      row("ce_inf_corrected", r.ce_inf_corrected, "CE∞ for an unbounded corpus from the same distribution: the plug-in raised by its first-order finite-pool bias c1/N, its interval widened for the correction's own error."),
      r.first_order_d1 ? row("first_order_d1", r.first_order_d1, "d1 in R(k) ≈ CE∞ + (d1 − c1)/k: the 1/k regime needs k ≫ d1.", "") : null,
      r.first_order_c1 ? row("first_order_c1", r.first_order_c1, "c1 in the same expansion: the finite-pool bias of log μ̂ over N documents is about −c1/N.", "") : null),
    el("details", {}, el("summary", {}, `R̂(k) and Δ(k) = R̂(k) − CE∞ at each of the ${r.risk_vs_k.length} grid points`),
      el("div", { class: "scroll" }, el("table", { class: "grid" }, el("thead", {}, el("tr", {}, el("th", {}, "k"), el("th", {}, "R̂(k)"), el("th", {}, "Δ(k)"))), el("tbody", {}, kRows)))));

  const ks = r.k_sufficient;
  const advice = el("div", { class: "card" },
    el("h2", {}, "How many negatives are enough"),
    el("p", { class: "verdict" }, kAdvice(r)),
    el("p", { class: "hint" }, `k_sufficient is the smallest grid k with |Δ(k′)| < ε = ${ks.eps} nats for every grid k′ ≥ k — required of every larger k, so one noisy dip under ε does not count. ${ks.method || ""}`));

  const t = r.theory_terms;
  const bounds = el("div", { class: "card" },
    el("h2", {}, "Bounds"),
    el("p", {}, `Vacuous threshold log(k+1) = ${fmt(t.vacuous_threshold)} nats: the largest InfoNCE gain possible at k = ${r.k}; a bound above it constrains nothing.`),
    table(
      row("finite_k_log", t.finite_k_log, "Proposition 1, one side: log(1 + exp(2/τ)/k) ≥ R(k) − CE∞, how far the risk at this k can sit above its k → ∞ limit."),
      row("prop1_upper", t.prop1_upper, "Proposition 1, other side: (exp(2/τ) − 1)²/(8k) ≥ CE∞ − R(k), how far it can sit below."),
      row("sample_variability", t.sample_variability, `(12/τ)·√(log(2/δ)/2n) with n = ${r.n_train_split_queries} training-split queries: one term of Theorem 1, whose complexity term is not computable — so not a bound by itself.`),
      ...t.not_computable.map((nc) => row(nc.name, nc, "A term of Theorem 1 that cannot be evaluated for this model."))));

  const mi = el("div", { class: "card" },
    el("h2", {}, "Mutual information between queries and documents"),
    el("p", { class: "hint" }, `Negatives for these figures: ${r.mi_sampler} — the positives' own marginal, which the InfoNCE bound needs.`),
    table(
      row("mi_lower_bound_k", r.mi_lower_bound_k, `log(k+1) − L_InfoNCE on held-out anchors (van den Oord et al. 2018): a lower bound on I(query; document), capped by log(k+1) and 2/τ.`),
      row("mi_cap_log_k_plus_1", r.mi_cap_log_k_plus_1, "log(k+1): the most the bound above can show at this k."),
      row("mi_cap_two_over_tau", r.mi_cap_two_over_tau, "2/τ: the most it can show at this temperature."),
      row("mi_lower_bound_inf", r.mi_lower_bound_inf, "−CE∞ under the positives' marginal: a normalised-critic bound on the mutual information, not capped by log(k+1).")));

  const cards = [verdictCard(r), head, gap, curve, advice, bounds, mi];
  if (r.retrieval) {
    const rt = r.retrieval;
    const g = rt.ndcg_at_10_gap;
    const metric = (name, key, meaning) => el("tr", {},
      el("th", { scope: "row" }, name),
      el("td", { class: "num", "data-label": "train" }, fmt(rt.train[key], 4)),
      el("td", { class: "num", "data-label": "test" }, fmt(rt.test[key], 4)),
      el("td", { class: "num", "data-label": "train − test" }, fmt(rt.train[key] - rt.test[key], 4),
        key === "ndcg_at_10" ? el("span", { class: "ci", title: g.method }, ` ${Math.round(g.level * 100)}% CI [${fmt(g.ci_low)}, ${fmt(g.ci_high)}]`) : null),
      el("td", {}, meaning));
    cards.push(el("div", { class: "card" },
      el("h2", {}, "Retrieval quality, training vs held-out queries"),
      el("table", { class: "grid report" },
        el("thead", {}, el("tr", {}, ["metric", `train (${rt.train.n_queries} queries)`, `test (${rt.test.n_queries} queries)`, "train − test", "what it means"].map((h) => el("th", {}, h)))),
        el("tbody", {},
          metric("nDCG@10", "ndcg_at_10", "Ranking quality of the top 10, graded by position (1 = every relevant document first). Its train − test gap has a bootstrap CI: positive = worse on held-out queries, the retrieval face of the risk gap."),
          metric("recall@10", "recall_at_10", "Share of the relevant documents found in the top 10."),
          metric("MRR@10", "mrr_at_10", "1 / rank of the first relevant document (0 beyond rank 10), averaged.")))));
  }
  const s = r.served_query_encoder;
  if (s) {
    cards.push(el("div", { class: "card" },
      el("h2", {}, `The query encoder serving now: ${s.backend}`),
      table(
        row("risk_test", s.risk_test, `Held-out InfoNCE risk at k = ${s.k}, τ = ${param(s.temperature)} with this query encoder.`),
        row("delta_vs_full", s.delta_vs_full, "Its risk minus the full query encoder's, paired on the same anchors: what the cheaper encoder costs.")),
      s.note ? el("p", { class: "hint" }, s.note) : null));
  }
  if (r.notes && r.notes.length) cards.push(el("div", { class: "card" }, el("h2", {}, "Notes"), el("ul", {}, r.notes.map((n) => el("li", {}, n)))));
  if (!r.plots.length) cards.splice(1, 0, el("p", { class: "status warn" }, "This report carries no plots (regenerate it with python -m training report)."));
  return cards;
}

export { loadReport };
