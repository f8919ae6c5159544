// The infonce-search page: plain JavaScript, no build step, no library. It only calls this server's
// documented routes. DOM is built with textContent (never innerHTML from data), so no answer can inject
// markup. The API key lives in the `state` object only: never in storage, cookies or the URL.

import { $, state } from "./common.js";
import { loadOverview } from "./overview.js";
import { followSearchLink, restoreSearch, searchHash, setUpSearch } from "./search.js";
import { watchJobs } from "./jobwatch.js";
import { loadBundles } from "./bundle.js";
import { loadDatasets, loadJobs, setUpJobs } from "./jobs.js";
import { loadReport } from "./report.js";
import { loadCollections, setUpCollections } from "./collections.js";
import { setUpDocuments } from "./documents.js";

// -- tabs ---------------------------------------------------------------------------------------------
const loaders = { search: () => {}, bundle: loadBundles, jobs: () => { loadJobs(); loadDatasets(); }, report: loadReport, collections: loadCollections };

function showTab() {
  const name = (location.hash || "#search").slice(1).split("?")[0]; // #search?q=… keeps the search
  const tab = name in loaders ? name : "search";
  if (tab === "search" && !location.hash.includes("?")) history.replaceState(null, "", searchHash());
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

// -- start --------------------------------------------------------------------------------------------
document.addEventListener("DOMContentLoaded", () => {
  $("api-key").addEventListener("input", (e) => { state.key = e.target.value.trim(); });
  setUpSearch();
  setUpDocuments();
  setUpJobs();
  window.addEventListener("hashchange", () => { followSearchLink(); showTab(); });
  $("plot-close").addEventListener("click", () => $("plot-view").close());
  restoreSearch(); // a search in the URL (a reload, a shared link) runs again
  setUpCollections(() => { loadOverview(); showTab(); }); // switching collection reloads what is shown
  loadOverview();
  setInterval(loadOverview, 15000); // the badge follows a swap (another operator's rollback)
  watchJobs(); // and a job's end at once
  showTab();
});
