// The infonce-search page: plain JavaScript, no build step, no library. It only calls this server's
// documented routes. DOM is built with textContent (never innerHTML from data), so no answer can inject
// markup. The API key lives in the `state` object only: never in storage, cookies or the URL.
"use strict";

const state = { key: "", overview: null, bundles: null, jobsTimer: null, reportVersion: null };
const $ = (id) => document.getElementById(id);

// -- helpers ------------------------------------------------------------------------------------------
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "class") node.className = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function fmt(x, digits = 3) {
  if (x === null || x === undefined) return "—";
  if (typeof x !== "number") return String(x);
  if (!Number.isFinite(x)) return String(x);
  if (Number.isInteger(x) && Math.abs(x) < 1e6) return String(x);
  const a = Math.abs(x);
  if (a !== 0 && (a < 1e-3 || a >= 1e6)) return x.toExponential(2);
  return x.toFixed(digits);
}

// a parameter as written (0.05, not 0.0500)
const param = (x) => (typeof x === "number" ? String(Number(x.toPrecision(4))) : fmt(x));

function when(value) {
  if (value === null || value === undefined) return "—";
  const date = typeof value === "number" ? new Date(value * 1000) : new Date(value);
  if (Number.isNaN(date.getTime())) return String(value);
  return date.toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
}

function setStatus(id, text, kind) {
  const node = $(id);
  node.textContent = text || "";
  node.className = "status" + (kind ? " " + kind : "");
}

class ApiError extends Error {
  constructor(status, code, message) {
    super(`${status} ${code}: ${message}`);
    this.status = status;
    this.code = code;
  }
}

// fetch a route of this server; errors become ApiError with the API's own code and message
// (with a key typed in, every call sends it: reads then show the detail the key unlocks)
async function api(method, path, body) {
  const headers = { accept: "application/json" };
  if (body !== undefined) headers["content-type"] = "application/json";
  if (state.key) headers["x-api-key"] = state.key;
  const response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  let data = null;
  try {
    data = await response.json();
  } catch (_) {
    data = null;
  }
  if (!response.ok) {
    const err = (data && data.error) || {};
    throw new ApiError(response.status, err.code || "http_error", err.message || response.statusText);
  }
  return data;
}

function needKey(statusId) {
  if (state.key) return false;
  setStatus(statusId, "Enter the API key (top right) first: this action changes the server.", "error");
  $("api-key").focus();
  return true;
}

// -- tabs ---------------------------------------------------------------------------------------------
const loaders = { search: () => {}, bundle: loadBundles, jobs: loadJobs, report: loadReport };

function showTab() {
  const name = (location.hash || "#search").slice(1);
  const tab = name in loaders ? name : "search";
  for (const section of document.querySelectorAll("main > section")) {
    section.hidden = section.dataset.section !== tab;
  }
  for (const link of document.querySelectorAll("nav a")) {
    link.classList.toggle("active", link.dataset.tab === tab);
  }
  clearInterval(state.jobsTimer);
  state.jobsTimer = null;
  if (tab === "jobs") state.jobsTimer = setInterval(() => loadJobs(true), 2000);
  loaders[tab]();
}

// -- overview (live badge, search modes) -------------------------------------------------------------
async function loadOverview() {
  try {
    const ov = await api("GET", "/ui/overview");
    state.overview = ov;
    const badge = $("live-badge");
    if (ov.live) {
      badge.textContent = `live ${ov.live.version}`;
      badge.className = "badge ok";
    } else {
      badge.textContent = `nothing live: ${ov.not_live_reason || "no bundle"}`;
      badge.className = "badge bad";
    }
    $("top-k").max = ov.max_top_k;
    const modes = ov.search_modes || [];
    $("mode-wrap").hidden = modes.length === 0;
    const select = $("mode");
    select.replaceChildren();
    if (ov.default_mode === null && modes.length) select.append(el("option", { value: "" }, "default"));
    for (const mode of modes) select.append(el("option", { value: mode, selected: mode === ov.default_mode }, mode));
  } catch (err) {
    $("live-badge").textContent = `API unreachable: ${err.message}`;
    $("live-badge").className = "badge bad";
  }
}

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
    renderResults(answer, roundTrip);
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

function renderResults(answer, roundTrip) {
  const hits = answer.results[0].hits;
  const t = answer.timings;
  setStatus(
    "search-status",
    `${hits.length} result${hits.length === 1 ? "" : "s"} from bundle ${answer.version} (${answer.metric} scores)` +
      ` · encode ${fmt(t.encode_ms, 1)} ms · search ${fmt(t.search_ms, 1)} ms · server ${fmt(t.total_ms, 1)} ms` +
      ` · round trip ${fmt(roundTrip, 1)} ms`
  );
  const list = $("results");
  list.replaceChildren(
    ...hits.map((hit) =>
      el(
        "li",
        { class: "hit" },
        el("div", { class: "hit-head" },
          el("span", { class: "score", title: "the model's learned similarity; higher is more similar" }, fmt(hit.score, 4)),
          el("span", { class: "title" }, hit.title || "(untitled)"),
          el("span", { class: "doc-id" }, hit.id)),
        el("p", { class: "snippet" }, snippet(hit.text)),
        hit.metadata && Object.keys(hit.metadata).length
          ? el("p", { class: "meta" }, Object.entries(hit.metadata).map(([k, v]) => `${k}=${JSON.stringify(v)}`).join("  "))
          : null
      )
    )
  );
  if (!hits.length) list.append(el("li", { class: "empty" }, "No document matched (check the filter)."));
  list.dataset.answered = String(Number(list.dataset.answered || 0) + 1); // lets a test wait for this answer
}

// -- bundle -------------------------------------------------------------------------------------------
async function loadBundles() {
  await loadOverview();
  const ov = state.overview;
  const live = $("live");
  live.replaceChildren();
  if (ov && ov.live) {
    const m = ov.live.model;
    const recall = ov.live.index_recall_at_10;
    const facts = [
      ["version", ov.live.version],
      ["model", el("span", { title: m.base_model }, ov.live.model_name)],
      ["similarity", `${m.metric} (index metric ${m.index_metric}, τ = ${param(m.temperature)})`],
      ["dimension", m.dim],
      ["index", m.index],
      ["measured recall@10", recall === null ? "exact search (1 by construction)" : fmt(recall, 4)],
      ["documents", m.n_vectors],
      ["query encoder", m.query_encoder],
      ["built", when(m.created_at)],
      ["code", m.code_version ? `${m.code_version.package}${m.code_version.git_sha ? " @ " + m.code_version.git_sha.slice(0, 10) : ""}` : "—"],
    ];
    for (const [k, v] of facts) live.append(el("dt", {}, k), el("dd", {}, v));
  } else if (ov) {
    live.append(el("dt", {}, "live"), el("dd", {}, `nothing: ${ov.not_live_reason || ""}`));
  }
  try {
    state.bundles = await api("GET", "/bundles?gate_limit=20");
    renderBundles(state.bundles);
  } catch (err) {
    setStatus("bundle-status", err.message, "error");
  }
}

function gateText(gate) {
  if (!gate) return "—";
  const values = gate.candidate_value === null || gate.candidate_value === undefined ? "" :
    ` (${gate.metric} ${fmt(gate.candidate_value, 4)}${gate.live_value !== null && gate.live_value !== undefined ? " vs live " + fmt(gate.live_value, 4) : ""})`;
  const verdict = gate.accepted ? "accepted" : "kept as candidate";
  let text = gate.reason; // the store's reasons often begin with the verdict already, and carry the values
  if (!text.startsWith(verdict) && !text.startsWith("forced")) text = `${verdict}${gate.forced ? ", forced" : ""}: ${text}`;
  return text.includes(gate.metric) ? text : text + values;
}

function renderBundles(b) {
  const liveIndex = b.versions.findIndex((v) => v.live);
  const rows = b.versions.slice().reverse().map((v) => {
    const index = b.versions.indexOf(v);
    const test = (v.metrics && v.metrics.test) || {};
    let action = null;
    if (!v.live) {
      const label = liveIndex >= 0 && index < liveIndex ? "Roll back" : "Activate";
      action = el("button", { class: "small", "data-version": v.version, onclick: () => activate(v.version) }, label);
    }
    return el("tr", { class: v.live ? "live" : null },
      el("td", { class: "mono" }, v.version),
      el("td", {}, v.live ? el("span", { class: "badge ok" }, "live") : v.current ? el("span", { class: "badge" }, "CURRENT") : ""),
      el("td", { class: "when" }, when(v.created_at)),
      el("td", { class: "num" }, fmt(test["ndcg@10"], 4)),
      el("td", { class: v.gate && !v.gate.accepted ? "warn" : null }, gateText(v.gate)),
      el("td", {}, action));
  });
  $("versions").replaceChildren(
    el("thead", {}, el("tr", {}, ["version", "", "created", "test nDCG@10", "gate decision", ""].map((h) => el("th", {}, h)))),
    el("tbody", {}, rows.length ? rows : el("tr", {}, el("td", { colspan: 6 }, "No versions published yet.")))
  );
  const log = b.gate_decisions.map((d) =>
    el("tr", {},
      el("td", { class: "when" }, when(d.decided_at)),
      el("td", {}, d.event || "publish"),
      el("td", { class: "mono" }, d.version),
      el("td", {}, d.event === "activate" ? `activated (was ${d.previous || "none"})` : gateText(d))));
  $("gate-log").replaceChildren(
    el("thead", {}, el("tr", {}, ["when", "event", "version", "decision"].map((h) => el("th", {}, h)))),
    el("tbody", {}, log.length ? log : el("tr", {}, el("td", { colspan: 4 }, "No decisions logged.")))
  );
  const notes = [];
  if (b.last_failed_load) notes.push(`last failed load: ${b.last_failed_load.version} at ${when(b.last_failed_load.at)}: ${b.last_failed_load.error}`);
  if (b.fallback_from) notes.push(`CURRENT names ${b.fallback_from}, which would not load: serving the newest that does`);
  for (const u of b.unreadable || []) notes.push(`unreadable ${u.version}: ${u.error}`);
  if (notes.length) setStatus("bundle-status", notes.join(" · "), "warn");
}

async function activate(version) {
  if (needKey("bundle-status")) return;
  setStatus("bundle-status", `Activating ${version} (validating, canary query)…`);
  try {
    const answer = await api("POST", `/bundles/${encodeURIComponent(version)}/activate`);
    setStatus("bundle-status", `${answer.version} is live (was ${answer.previous || "none"}; query encoder ${answer.encoder_backend}).`, "ok");
    await loadBundles();
  } catch (err) {
    setStatus("bundle-status", `Activation refused: ${err.message}`, "error");
  }
}

// -- jobs ---------------------------------------------------------------------------------------------
function progressText(job) {
  const p = job.progress || {};
  if (job.state === "queued") return "waiting for a worker";
  if (job.state === "succeeded") return "done";
  const parts = [job.state === "running" ? p.phase : p.phase === "queued" ? "stopped before it started" : `stopped in ${p.phase}`];
  if (p.total_steps) parts.push(`step ${p.step}/${p.total_steps}`);
  else if (p.step) parts.push(`step ${p.step}`);
  if (p.epoch !== null && p.epoch !== undefined) parts.push(`epoch ${p.epoch}`);
  if (p.loss !== null && p.loss !== undefined) parts.push(`loss ${fmt(p.loss, 4)}`);
  if (p.eta_s !== null && p.eta_s !== undefined && job.state === "running") parts.push(`ETA ${Math.round(p.eta_s)} s`);
  return parts.filter(Boolean).join(" · ");
}

async function loadJobs(quiet) {
  try {
    const listing = await api("GET", "/jobs?limit=20");
    renderJobs(listing.jobs);
  } catch (err) {
    if (!quiet || err.status !== 403) setStatus("job-status", err.message, "error");
  }
}

function renderJobs(jobs) {
  const rows = jobs.map((job) => {
    const p = job.progress || {};
    const fraction = job.state === "succeeded" ? 1 : p.total_steps ? Math.min(1, p.step / p.total_steps) : 0;
    const finished = ["succeeded", "failed", "cancelled"].includes(job.state);
    const detail = [];
    if (job.dataset) detail.push(`dataset ${job.dataset}`);
    if (job.bundle_version) detail.push(`bundle ${job.bundle_version}${job.live === true ? " (live)" : job.live === false ? " (not published live)" : ""}`);
    if (job.gate_reason) detail.push(job.gate_reason);
    if (job.error) detail.push(`error: ${job.error}`);
    return el("tr", { "data-job": job.id },
      el("td", { class: "mono" }, job.id),
      el("td", {}, job.type),
      el("td", {}, el("span", { class: `state ${job.state}` }, job.state + (job.cancel_requested && !finished ? " (cancelling)" : ""))),
      el("td", {}, el("progress", { max: 1, value: fraction }), " ", progressText(job)),
      el("td", { class: "when" }, when(job.created_at)),
      el("td", { class: "detail" }, detail.join(" · ")),
      el("td", {}, finished || job.cancel_requested ? null :
        el("button", { class: "small", onclick: () => cancelJob(job.id) }, "Cancel")));
  });
  $("jobs").replaceChildren(
    el("thead", {}, el("tr", {}, ["id", "type", "state", "progress", "submitted", "detail", ""].map((h) => el("th", {}, h)))),
    el("tbody", {}, rows.length ? rows : el("tr", {}, el("td", { colspan: 7 }, "No jobs yet.")))
  );
}

async function submitJob(event) {
  event.preventDefault();
  if (needKey("job-status")) return;
  let options = {};
  const raw = $("job-options").value.trim();
  if (raw) {
    try {
      options = JSON.parse(raw);
    } catch (err) {
      setStatus("job-status", `options: not JSON (${err.message})`, "error");
      return;
    }
  }
  const body = { type: $("job-type").value, dataset: $("job-dataset").value.trim(), options };
  try {
    const job = await api("POST", "/jobs", body);
    setStatus("job-status", `Queued ${job.type} job ${job.id}; a worker picks it up.`, "ok");
    await loadJobs();
  } catch (err) {
    setStatus("job-status", `Not queued: ${err.message}`, "error");
  }
}

async function cancelJob(id) {
  if (needKey("job-status")) return;
  try {
    const job = await api("POST", `/jobs/${encodeURIComponent(id)}/cancel`);
    setStatus("job-status", `Job ${job.id}: ${job.state}${job.cancel_requested && job.state === "running" ? " (stops at its next step)" : ""}.`, "ok");
    await loadJobs();
  } catch (err) {
    setStatus("job-status", `Not cancelled: ${err.message}`, "error");
  }
}

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
  return el("span", { title: x.assumptions },
    el("b", {}, fmt(x.value)), ` ${unit} `, el("span", { class: "kind" }, tag),
    x.vacuous ? el("span", { class: "badge bad", title: "exceeds log(k+1): it constrains nothing" }, "vacuous") : null);
}

function row(name, value, meaning, unit = "nats") {
  const why = [meaning];
  if (value && value.kind === "not_computable") why.push(el("span", { class: "reason" }, ` Not computable: ${value.reason}`));
  return el("tr", {}, el("th", { scope: "row" }, name), el("td", { class: "value" }, valueNode(value, unit)), el("td", {}, why));
}

function table(...rows) {
  return el("table", { class: "grid report" },
    el("thead", {}, el("tr", {}, el("th", {}, "quantity"), el("th", {}, "value"), el("th", {}, "what it means"))),
    el("tbody", {}, rows));
}

function plotFigure(version, report, name, caption) {
  if (!report.plots.includes(name)) return null;
  return el("figure", {},
    el("img", { src: `/bundles/${encodeURIComponent(version)}/plots/${encodeURIComponent(name)}`, alt: caption, "data-plot": name, loading: "eager" }),
    el("figcaption", {}, caption));
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
  if (state.reportVersion === answer.version && box.dataset.rendered) return;
  state.reportVersion = answer.version;
  box.replaceChildren(...renderReport(answer.version, answer.report));
  box.dataset.rendered = "1";
}

function renderReport(version, r) {
  const tau = r.model.temperature;
  const head = el("div", { class: "card" },
    el("h2", {}, `Generalization gap of bundle ${version}`),
    el("p", {},
      `Model ${r.model.name} (${r.model.metric}, τ = ${param(tau)}${r.model.temperature_effective !== tau ? `, τ_eff = ${param(r.model.temperature_effective)}` : ""}). `,
      `k = ${r.k} negatives per anchor (${r.k_rule}); negatives: ${r.negative_sampler}. `,
      `${r.n_train} training anchors from ${r.n_train_queries} queries, ${r.n_test} held-out anchors from ${r.n_test_queries} queries; `,
      `pool of ${r.pool_size} documents; seed ${r.seed}; ${r.n_bootstrap} bootstrap replicates; written ${when(r.created_at)}.`),
    el("p", { class: "hint" },
      "Every number is in nats and says its kind: an estimate has a confidence interval, a bound holds under stated assumptions " +
      "(vacuous when it exceeds log(k+1), i.e. it constrains nothing), a term is one computable part of a bound, " +
      "and a quantity that cannot be evaluated says why instead of showing a number."));

  const gap = el("div", { class: "card" },
    el("h2", {}, "The gap"),
    el("p", { class: "verdict" }, gapVerdict(r.gap)),
    table(
      row("gap", r.gap, "Held-out risk minus training risk (R_test − R_train): how much worse the model does on queries it never saw. Bootstrap CI, queries resampled within each split."),
      row("risk_train", r.risk_train, `R(k, τ) = mean InfoNCE − log k of the final model on a sample of training queries, with k random negatives from the corpus (never mined ones).`),
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
      el("table", { class: "grid" }, el("thead", {}, el("tr", {}, el("th", {}, "k"), el("th", {}, "R̂(k)"), el("th", {}, "Δ(k)"))), el("tbody", {}, kRows))));

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
      row("finite_k_log", t.finite_k_log, "Proposition 1, one side: log(1 + e^{2/τ}/k) ≥ R(k) − CE∞, how far the risk at this k can sit above its k → ∞ limit."),
      row("prop1_upper", t.prop1_upper, "Proposition 1, other side: (e^{2/τ} − 1)²/(8k) ≥ CE∞ − R(k), how far it can sit below."),
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

  const cards = [head, gap, curve, advice, bounds, mi];
  if (r.retrieval) {
    const rt = r.retrieval;
    const g = rt.ndcg_at_10_gap;
    const metric = (name, key, meaning) => el("tr", {},
      el("th", { scope: "row" }, name), el("td", { class: "num" }, fmt(rt.train[key], 4)), el("td", { class: "num" }, fmt(rt.test[key], 4)),
      el("td", { class: "num" }, fmt(rt.train[key] - rt.test[key], 4),
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

// -- start --------------------------------------------------------------------------------------------
document.addEventListener("DOMContentLoaded", () => {
  $("api-key").addEventListener("input", (e) => { state.key = e.target.value.trim(); });
  $("search-form").addEventListener("submit", runSearch);
  $("job-form").addEventListener("submit", submitJob);
  window.addEventListener("hashchange", showTab);
  loadOverview();
  setInterval(loadOverview, 15000); // the badge follows a swap (a job's publish, another operator's rollback)
  showTab();
});
