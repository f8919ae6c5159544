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
