// Shared by the page's modules: state (the API key lives here, in memory only), DOM and number helpers,
// and `api`, the one place that calls the server.

// `collection`: the one the page works on; "default" is the routes without /collections/{name}/
const state = { key: "", overview: null, bundles: null, jobsTimer: null, reportVersion: null, collection: "default" };
const $ = (id) => document.getElementById(id);

// -- helpers -------------------------------------------------------------------------------------------
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
  if (a >= 1e6) return huge(x);
  if (a !== 0 && a < 1e-3) return x.toExponential(2);
  return x.toFixed(digits);
}

// 2.23e+32 reads "2.2 × 10³²": a power of ten a person can read (a vacuous bound is often that large)
const SUPERSCRIPT = { "-": "⁻", 0: "⁰", 1: "¹", 2: "²", 3: "³", 4: "⁴", 5: "⁵", 6: "⁶", 7: "⁷", 8: "⁸", 9: "⁹" };
function huge(x) {
  const [mantissa, exponent] = x.toExponential(1).split("e");
  const power = String(Number(exponent)).replace(/./g, (c) => SUPERSCRIPT[c]);
  return `${mantissa} × 10${power}`;
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

// a route of the selected collection: /search stays /search for "default", else /collections/{name}/search;
// the routes about collections themselves (/collections, /aliases) are the same for every collection
function scoped(path) {
  if (state.collection === "default" || path.startsWith("/collections") || path.startsWith("/aliases")) return path;
  return `/collections/${encodeURIComponent(state.collection)}${path}`;
}

// fetch a route of this server (of the selected collection, see `scoped`); errors become ApiError with the
// API's own code and message (with a key typed in, every call sends it: reads then show the detail the key unlocks)
async function api(method, path, body) {
  const headers = { accept: "application/json" };
  if (body !== undefined) headers["content-type"] = "application/json";
  if (state.key) headers["x-api-key"] = state.key;
  const response = await fetch(scoped(path), { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
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

export { state, $, el, fmt, param, when, setStatus, ApiError, api, needKey, scoped };
