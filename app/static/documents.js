// Writing documents from the page (the Search tab's "Write a document"): upsert one document (id, title,
// text, metadata) or delete one by id, with the API key. The answer's seq is the write's place in the
// mutation log; searches find an upserted document at once, in every mode (no retrain, no reindex).

import { $, api, needKey, setStatus } from "./common.js";

const STATUS = "doc-write-status";

async function upsertDocument(event) {
  event.preventDefault();
  if (needKey(STATUS)) return;
  const id = $("doc-id").value.trim();
  const doc = { id, text: $("doc-text").value };
  const title = $("doc-title").value.trim();
  if (title) doc.title = title;
  const raw = $("doc-metadata").value.trim();
  if (raw) {
    try {
      doc.metadata = JSON.parse(raw);
    } catch (err) {
      setStatus(STATUS, `metadata: not JSON (${err.message})`, "error");
      return;
    }
  }
  try {
    const answer = await api("POST", "/documents", { documents: [doc] });
    setStatus(STATUS, `Upserted ${id} (log seq ${answer.seq}, bundle ${answer.version}): searches find it now.`, "ok");
  } catch (err) {
    setStatus(STATUS, err.message, "error");
  }
}

async function deleteDocument() {
  if (needKey(STATUS)) return;
  const id = $("doc-id").value.trim();
  if (!id) {
    setStatus(STATUS, "Give the id of the document to delete.", "error");
    return;
  }
  try {
    const answer = await api("POST", "/documents/delete", { ids: [id] });
    const missing = (answer.not_found || []).includes(id);
    setStatus(STATUS, missing ? `No document ${id}: nothing deleted.` : `Deleted ${id} (log seq ${answer.seq}).`, missing ? "error" : "ok");
  } catch (err) {
    setStatus(STATUS, err.message, "error");
  }
}

function setUpDocuments() {
  $("doc-form").addEventListener("submit", upsertDocument);
  $("doc-delete").addEventListener("click", deleteDocument);
}

export { setUpDocuments };
