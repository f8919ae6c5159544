// The jobs tab: submit retrain / reindex, progress of the recent jobs, cancel.

import { $, api, el, fmt, needKey, setStatus, when } from "./common.js";

// -- jobs ---------------------------------------------------------------------------------------------
function progressText(job) {
  const p = job.progress || {};
  if (job.state === "queued") return "waiting for a worker";
  if (job.state === "succeeded") return "done";
  const parts = [job.state === "running" ? p.phase : p.phase === "queued" || p.phase === "not started" ? "stopped before it started" : `stopped in ${p.phase}`];
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
    document.dispatchEvent(new CustomEvent("jobs", { detail: listing.jobs })); // jobwatch.js: the badge
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

export { loadJobs, submitJob };
