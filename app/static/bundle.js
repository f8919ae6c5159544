// The bundle tab: the live bundle's identity, the versions with their gate decisions, activate / roll back.

import { $, api, el, fmt, needKey, param, setStatus, state, when } from "./common.js";
import { loadOverview } from "./overview.js";

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
    renderServing(state.bundles);
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

// -- how the live bundle searches: modes and fusion, nDCG per mode, the mutation log, the query encoder --
const MODE_WHY = {
  dense: "the fine-tuned encoder + the vector index: matches meaning",
  lexical: "BM25 over the documents' words: matches exact terms",
  hybrid: "both lists fused: meaning and exact terms",
};

const four = (x) => (typeof x === "number" ? x.toFixed(4) : "—"); // 1 reads 1.0000, like its neighbours

function fusionText(f) {
  if (!f) return "—";
  const rule = f.method === "convex" ? `convex, α = ${param(f.alpha)} on the dense side` : `RRF, k = ${param(f.k ?? f.rrf_k)}`;
  return `${rule}; ${f.depth} candidates from each list`;
}

function renderServing(b) {
  const live = b.versions.find((v) => v.live);
  const retrieval = (live && live.retrieval) || null;
  const modesBox = $("modes");
  if (!live) { modesBox.replaceChildren(); return; }
  const val = retrieval && retrieval.validation;
  const rows = ["dense", "lexical", "hybrid"].map((mode) => {
    const test = live.metrics[`test.${mode}`];
    const isDefault = retrieval ? retrieval.default_mode === mode : mode === "dense";
    return el("tr", { class: isDefault ? "live" : null, "data-mode": mode },
      el("th", { scope: "row" }, mode, isDefault ? el("span", { class: "badge ok" }, "default") : null),
      el("td", { class: "num", "data-label": "test nDCG@10" }, four(test ? test["ndcg@10"] : null)),
      el("td", { class: "num", "data-label": "validation nDCG@10" }, four(val && val.modes ? val.modes[mode] : null)),
      el("td", {}, retrieval || mode === "dense" ? MODE_WHY[mode] : "not in this bundle (no lexical index)"));
  });
  const notes = [
    retrieval
      ? `Default mode ${retrieval.default_mode}: the best of the three on ${val ? val.n_queries + " validation queries carved from the training split" : "— (no validation queries: untuned defaults)"}. Hybrid fuses by ${fusionText(retrieval.fusion)}.`
      : "This bundle has no lexical index (built before hybrid search): dense only.",
    "The base (not fine-tuned) encoder's nDCG per mode is not recorded in the manifest; python -m training train prints base vs tuned.",
  ];
  modesBox.replaceChildren(
    el("div", { class: "scroll" }, el("table", { class: "grid report", id: "modes-table" },
      el("thead", {}, el("tr", {}, ["mode", "test nDCG@10", "validation nDCG@10", "what it searches"].map((h) => el("th", {}, h)))),
      el("tbody", {}, rows))),
    ...notes.map((n) => el("p", { class: "hint" }, n)));

  const m = b.mutations;
  const log = $("mutations");
  log.replaceChildren();
  if (m) {
    const facts = [
      ["log head", `seq ${m.log_seq}`],
      ["folded into the bundle", `up to seq ${m.bundle_seq ?? "—"}`],
      ["applied by this process", `up to seq ${m.applied_seq ?? "—"}`],
      ["delta documents", m.delta_docs ?? "—"],
      ["tombstones", m.tombstones ?? "—"],
      ["compaction", m.compaction_suggested ? m.compaction_reason : `not needed yet (suggested at ${m.compaction_threshold} delta documents + tombstones)`],
      ["replicas", (m.replicas || []).map((r) => `${r.replica}: seq ${r.applied_seq ?? "?"}`).join(", ") || "—"],
    ];
    for (const [k, v] of facts) log.append(el("dt", {}, k), el("dd", { class: k === "compaction" && m.compaction_suggested ? "warn" : null }, v));
  }
  const enc = $("encoder");
  enc.replaceChildren();
  const choice = b.encoder_choice;
  enc.append(el("dt", {}, "query encoder"), el("dd", {}, b.encoder_backend || "—"));
  if (choice && choice.candidates) {
    for (const c of choice.candidates) {
      const ms = c.ms_per_query ?? c.ms;
      enc.append(el("dt", {}, c.backend || c.name), el("dd", {},
        `${ms === null || ms === undefined ? "not timed" : fmt(ms, 2) + " ms per query"}` +
        `${c.ndcg_loss !== undefined && c.ndcg_loss !== null ? ` · nDCG@10 loss ${fmt(c.ndcg_loss, 4)}` : ""}` +
        `${c.eligible === false ? " · not eligible" : ""}`));
    }
  } else {
    enc.append(el("dt", {}, "timings"), el("dd", {}, "only with SEARCH_ENCODER_BACKEND=auto, which times each candidate at load"));
  }
}

async function activate(version) {
  if (needKey("bundle-status")) return;
  setStatus("bundle-status", `Activating ${version} (validating, canary query)…`);
  const buttons = [...document.querySelectorAll("#versions button")];
  buttons.forEach((b) => { b.disabled = true; }); // one activation at a time from this page
  try {
    const answer = await api("POST", `/bundles/${encodeURIComponent(version)}/activate`);
    setStatus("bundle-status", `${answer.version} is live (was ${answer.previous || "none"}; query encoder ${answer.encoder_backend}).`, "ok");
    await loadBundles();
  } catch (err) {
    setStatus("bundle-status", `Activation refused: ${err.message}`, "error");
  } finally {
    buttons.forEach((b) => { b.disabled = false; });
  }
}

export { loadBundles };
