// The header badge follows the jobs the page has seen queued or running: when one ends, the badge is
// refreshed at once instead of at the next 15 s overview poll (a job's success showed late, issue 44).
// The jobs tab's own listing (jobs.js's "jobs" event) feeds it; on other tabs it polls GET /jobs itself,
// only while a job it watches has not ended.

import { api, state } from "./common.js";
import { loadOverview } from "./overview.js";

const POLL_MS = 2000; // as the jobs tab's own refresh
const FINISHED = new Set(["succeeded", "failed", "cancelled"]);
const watching = new Set();
let timer = null;

function note(jobs) {
  let ended = false;
  for (const job of jobs) {
    if (!FINISHED.has(job.state)) watching.add(job.id);
    else if (watching.delete(job.id)) ended = true;
  }
  if (ended) {
    // the server swaps to a published bundle within its reload poll: look again shortly after too
    loadOverview();
    setTimeout(loadOverview, 1500);
  }
  clearTimeout(timer);
  timer = watching.size ? setTimeout(poll, POLL_MS) : null;
}

async function poll() {
  timer = null;
  if (state.jobsTimer) return note([]); // the jobs tab is listing them already, and tells us
  try {
    note((await api("GET", "/jobs?limit=20")).jobs);
  } catch (_) {
    timer = setTimeout(poll, POLL_MS * 5); // a refused or failed listing: try again, later
  }
}

function watchJobs() {
  document.addEventListener("jobs", (e) => note(e.detail));
  poll(); // the jobs already running when the page opens
}

export { watchJobs };
