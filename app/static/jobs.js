// The jobs tab: submit retrain / reindex (datasets offered, example options per type), progress of the recent
// jobs (bar, ETA, duration, log tail with the key), cancel.

import { $, api, el, fmt, needKey, setStatus, state, when } from "./common.js";

// -- jobs ---------------------------------------------------------------------------------------------
const openLogs = new Set(); // jobs whose log the reader opened: the list is redrawn every 2 s

// seconds as a person says them: 42 s, 3 min 5 s, 1 h 20 min
function span(seconds) {
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min${s % 60 ? ` ${s % 60} s` : ""}`;
  return `${Math.floor(s / 3600)} h${Math.floor((s % 3600) / 60) ? ` ${Math.floor((s % 3600) / 60)} min` : ""}`;
}

const known = (x) => x !== null && x !== undefined;

// the share of the current phase done: the worker's fraction (older records: step / total), 1 when done;
// null while a phase runs that is not counted (the bar then moves without a value)
function fractionOf(job) {
  const p = job.progress || {};
  if (job.state === "succeeded") return 1;
  if (known(p.fraction)) return p.fraction;
  if (p.total_steps) return Math.min(1, p.step / p.total_steps);
  return job.state === "running" ? null : 0;
}

function progressText(job) {
  const p = job.progress || {};
  if (job.state === "queued") return p.phase && p.phase.startsWith("waiting") ? p.phase : "waiting for a worker";
  const finished = job.state !== "running";
  const parts = [];
  if (job.state === "succeeded") parts.push("done");
  else if (!finished) parts.push(p.phase);
  else parts.push(p.phase === "queued" || p.phase === "not started" ? "stopped before it started" : `stopped in ${p.phase}`);
  if (!finished && p.total_steps) parts.push(`${p.step}/${p.total_steps} (${Math.round(100 * fractionOf(job))} %)`);
  if (known(p.epoch) && !finished) parts.push(`epoch ${p.epoch}`);
  if (known(p.loss) && !finished) parts.push(`loss ${fmt(p.loss, 4)}`);
  if (!finished && known(p.eta_s)) parts.push(`ETA ${span(p.eta_s)}`);
  if (known(job.duration_s)) parts.push(finished ? `took ${span(job.duration_s)}` : `${span(job.duration_s)} so far`);
  return parts.filter(Boolean).join(" · ");
}

async function loadJobs(quiet) {
  try {
    const listing = await api("GET", "/jobs?limit=20");
    renderJobs(listing.jobs);
    document.dispatchEvent(new CustomEvent("jobs", { detail: listing.jobs })); // jobwatch.js: the badge
  } catch (err) {
    if (!quiet || err.status !== 403) setStatus("job-status", err.message, "error");
  }
}

// the worker's recent log lines: in the record, shown with the API key (JobDetail.log_tail)
function logTail(job) {
  if (!job.log_tail || !job.log_tail.length) return null;
  const details = el("details", { class: "log", open: openLogs.has(job.id) },
    el("summary", {}, `log (last ${job.log_tail.length} lines)`),
    el("pre", {}, job.log_tail.join("\n")));
  details.addEventListener("toggle", () => (details.open ? openLogs.add(job.id) : openLogs.delete(job.id)));
  return details;
}

function renderJobs(jobs) {
  const rows = jobs.map((job) => {
    const fraction = fractionOf(job);
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
      el("td", { class: "progress" }, el("progress", { max: 1, value: fraction === null ? null : String(fraction) }), " ",
        el("span", { class: "progress-text" }, progressText(job))),
      el("td", { class: "when" }, when(job.created_at)),
      el("td", { class: "detail" }, detail.join(" · "), logTail(job)),
      el("td", {}, finished || job.cancel_requested ? null :
        el("button", { class: "small", onclick: () => cancelJob(job.id) }, "Cancel")));
  });
  $("jobs").replaceChildren(
    el("thead", {}, el("tr", {}, ["id", "type", "state", "progress", "submitted", "detail", ""].map((h) => el("th", {}, h)))),
    el("tbody", {}, rows.length ? rows : el("tr", {}, el("td", { colspan: 7 }, "No jobs yet.")))
  );
}

// the example options follow the job type: each <option> carries one its type accepts (a reindex refuses
// training options such as epochs: 422)
function showExample() {
  const example = $("job-type").selectedOptions[0].dataset.example;
  $("job-options").placeholder = `JSON, e.g. ${example}`;
}

// the datasets a job may name (GET /datasets, behind the key as submitting is), offered by the field
async function loadDatasets() {
  if (!state.key) return;
  try {
    const listing = await api("GET", "/datasets");
    $("job-datasets").replaceChildren(...listing.datasets.map((name) => el("option", { value: name })));
  } catch {
    // a wrong key: the submit says so; the field still takes a typed name
  }
}

function setUpJobs() {
  $("job-form").addEventListener("submit", submitJob);
  $("job-type").addEventListener("change", showExample);
  $("job-dataset").addEventListener("focus", loadDatasets);
  showExample();
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

export { loadJobs, loadDatasets, setUpJobs };
