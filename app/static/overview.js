// The header's live badge and the search form's mode selector, from GET /ui/overview.

import { $, api, el, state } from "./common.js";

// -- overview (live badge, search modes) -------------------------------------------------------------
async function loadOverview() {
  try {
    const ov = await api("GET", "/ui/overview");
    state.overview = ov;
    const badge = $("live-badge");
    if (ov.live) {
      badge.textContent = `live ${ov.live.version}`;
      badge.className = "badge ok";
    } else {
      badge.textContent = `nothing live: ${ov.not_live_reason || "no bundle"}`;
      badge.className = "badge bad";
    }
    $("top-k").max = ov.max_top_k;
    const modes = ov.search_modes || [];
    $("mode-wrap").hidden = modes.length === 0;
    const select = $("mode");
    const chosen = select.value; // a refresh (every 15 s) keeps what the user picked
    select.replaceChildren();
    const own = ov.live ? ov.live.default_mode : null; // the live bundle's default, what "default" runs
    if (ov.default_mode === null && modes.length) {
      select.append(el("option", { value: "" }, own ? `default (${own})` : "default"));
    }
    for (const mode of modes) {
      const served = !ov.live || ov.live.modes.includes(mode);
      select.append(el("option", {
        value: mode,
        selected: mode === ov.default_mode,
        disabled: !served,
        title: served ? null : `bundle ${ov.live.version} has no lexical index: dense only`,
      }, served ? mode : `${mode} (not in this bundle)`));
    }
    if ([...select.options].some((o) => o.value === chosen && !o.disabled)) select.value = chosen;
  } catch (err) {
    $("live-badge").textContent = `API unreachable: ${err.message}`;
    $("live-badge").className = "badge bad";
  }
}

export { loadOverview };
