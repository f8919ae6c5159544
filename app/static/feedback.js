// Relevance judgments from the page (issue 41): each hit's "relevant / not relevant" buttons POST one
// judgment {query, document_id, relevant, search_id} to the selected collection's /feedback, with the key
// typed in the header (SEARCH_API_KEY or SEARCH_FEEDBACK_KEY). The search_id ties it to what was shown:
// the server records the version, mode and rank from it.

import { api, el, state } from "./common.js";

// the controls under one hit; `shown` is {query, searchId} of the answer it came in
function judgeControls(hit, shown) {
  const note = el("span", { class: "judged", role: "status" });
  const send = async (relevant, button) => {
    const box = button.parentElement;
    if (!state.key) {
      note.textContent = "Not recorded: enter the API key or the feedback key (top right) first.";
      note.className = "judged error";
      return;
    }
    for (const b of box.querySelectorAll("button")) b.disabled = true;
    note.textContent = "Sending…";
    note.className = "judged";
    try {
      const judgment = { query: shown.query, document_id: hit.id, relevant };
      if (shown.searchId) judgment.search_id = shown.searchId;
      const answer = await api("POST", "/feedback", { judgments: [judgment] });
      note.textContent = `Recorded: ${relevant ? "relevant" : "not relevant"} (judgment ${answer.last_seq}).`;
      note.className = "judged ok";
      box.dataset.judged = relevant ? "relevant" : "not-relevant";
      button.setAttribute("aria-pressed", "true");
    } catch (err) {
      note.textContent = `Not recorded: ${err.message}.`.replace(/\.\.$/, ".");
      note.className = "judged error";
    } finally {
      for (const b of box.querySelectorAll("button")) b.disabled = false;
    }
  };
  return el("div", { class: "judge", "aria-label": `judge ${hit.id}` },
    el("span", { class: "hint" }, "For this query:"),
    el("button", { type: "button", class: "small secondary", "data-relevant": "true", onclick: (e) => send(true, e.currentTarget) }, "relevant"),
    el("button", { type: "button", class: "small secondary", "data-relevant": "false", onclick: (e) => send(false, e.currentTarget) }, "not relevant"),
    note);
}

export { judgeControls };
