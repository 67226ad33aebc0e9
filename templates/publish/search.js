// The public site's search: search.json (public titles and text only), matched in the
// browser. Every word must appear in the title or the text; titles first, newest first.
"use strict";
(function () {
  const form = document.getElementById("search");
  const input = document.getElementById("q");
  const status = document.getElementById("search-status");
  const list = document.getElementById("search-results");
  let index = null;

  function show(query) {
    const words = query.toLowerCase().split(/\s+/).filter(Boolean);
    list.replaceChildren();
    if (!words.length) { status.textContent = ""; return; }
    const hits = index.filter((e) => {
      const text = (e.t + " " + e.x).toLowerCase();
      return words.every((w) => text.includes(w));
    }).map((e) => ({ e, inTitle: words.every((w) => e.t.toLowerCase().includes(w)) }));
    hits.sort((a, b) => (b.inTitle - a.inTitle) || (a.e.d < b.e.d ? 1 : -1));
    for (const { e } of hits.slice(0, 50)) {
      const item = document.createElement("li");
      const link = document.createElement("a");
      link.href = e.u;
      link.textContent = e.t;
      const when = document.createElement("time");
      when.dateTime = e.d;
      when.textContent = " " + e.d;
      item.append(link, when);
      list.append(item);
    }
    status.textContent = hits.length === 1 ? "1 entry" : hits.length + " entries";
  }

  fetch("search.json").then((r) => r.json()).then((found) => {
    index = found;
    // ?q= from a link or the form without script; else what was typed while it loaded
    const query = new URLSearchParams(location.search).get("q");
    if (query && !input.value) input.value = query;
    show(input.value);
  });
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    if (index) show(input.value);
    history.replaceState(null, "", "?q=" + encodeURIComponent(input.value));
  });
  input.addEventListener("input", () => { if (index) show(input.value); });
}());
