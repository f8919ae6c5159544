// The collection selector (every other tab works on the selected collection) and the collections tab:
// what exists, what this server has loaded, and a form creating one trained from a dataset (API key).

import { $, api, el, fmt, needKey, setStatus, state, when } from "./common.js";

let onSwitch = () => {};

// -- the selector in the header -----------------------------------------------------------------------
function fillSelector(listing) {
  const select = $("collection");
  state.unloaded = new Set(listing.collections.filter((c) => !c.loaded).map((c) => c.name)); // search.js says it loads
  const names = listing.collections.map((c) => c.name);
  const aliases = Object.entries(listing.aliases || {});
  if (!names.includes(state.collection) && !(state.collection in (listing.aliases || {}))) state.collection = "default";
  select.replaceChildren(
    ...names.map((name) => el("option", { value: name, selected: name === state.collection }, name)),
    ...aliases.map(([alias, target]) => el("option", { value: alias, selected: alias === state.collection }, `${alias} → ${target}`))
  );
}

function switchTo(name) {
  if (name === state.collection) return;
  state.collection = name;
  state.reportVersion = null; // the report tab renders the new collection's report
  state.bundles = null;
  $("results").replaceChildren();
  setStatus("search-status", "");
  onSwitch();
}

// -- the collections tab -------------------------------------------------------------------------------
async function loadCollections() {
  try {
    const listing = await api("GET", "/collections");
    fillSelector(listing);
    renderCollections(listing);
  } catch (err) {
    setStatus("collections-status", err.message, "error");
  }
}

function renderCollections(listing) {
  const rows = listing.collections.map((c) =>
    el("tr", { "data-collection": c.name, class: c.name === state.collection ? "live" : null },
      el("td", { class: "mono" }, c.name),
      el("td", {}, c.aliases.join(", ")),
      el("td", { class: "mono" }, c.current || "nothing published"),
      el("td", {}, c.loaded ? `loaded${c.load_seconds !== null ? ` in ${fmt(c.load_seconds, 2)} s` : ""}` : "not loaded"),
      el("td", {}, c.resident_bytes ? `${fmt(c.resident_bytes / 1e6, 1)} MB` : "—"),
      el("td", { class: "when" }, when(c.created_at)),
      el("td", {}, c.dataset || "—"),
      el("td", {}, c.name === state.collection ? "selected" :
        el("button", { class: "small", onclick: () => { $("collection").value = c.name; switchTo(c.name); loadCollections(); } }, "Select"))));
  $("collections-table").replaceChildren(
    el("thead", {}, el("tr", {}, ["name", "aliases", "CURRENT", "here", "memory", "created", "dataset", ""].map((h) => el("th", {}, h)))),
    el("tbody", {}, rows)
  );
  const budget = listing.max_loaded_bytes === null ? "no byte budget" : `budget ${fmt(listing.max_loaded_bytes / 1e6, 1)} MB`;
  $("collections-summary").textContent =
    `${listing.loaded} loaded here (at most ${listing.max_loaded_collections} besides default; ${budget}), ` +
    `holding ${fmt(listing.resident_bytes / 1e6, 1)} MB; a collection loads on its first request.`;
}

async function createCollection(event) {
  event.preventDefault();
  if (needKey("collections-status")) return;
  let options = {};
  const raw = $("collection-options").value.trim();
  if (raw) {
    try {
      options = JSON.parse(raw);
    } catch (err) {
      setStatus("collections-status", `options: not JSON (${err.message})`, "error");
      return;
    }
  }
  const name = $("collection-name").value.trim();
  const dataset = $("collection-dataset").value.trim();
  const body = dataset ? { name, dataset, options } : { name };
  try {
    const made = await api("POST", "/collections", body);
    const job = made.job_id ? ` Retrain job ${made.job_id} queued: its first bundle goes live when the job passes the gate.` : "";
    setStatus("collections-status", `Created collection ${made.name}.${job}`, "ok");
    await loadCollections();
  } catch (err) {
    setStatus("collections-status", `Not created: ${err.message}`, "error");
  }
}

function setUpCollections(reload) {
  onSwitch = reload;
  $("collection").addEventListener("change", (e) => switchTo(e.target.value));
  $("collection-form").addEventListener("submit", createCollection);
  loadCollections();
}

export { loadCollections, setUpCollections };
