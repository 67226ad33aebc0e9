// The schedule form: while the owner types "when", show what it means (the crontab line a
// phrase becomes, and the next fires in the chosen zone). Without script the form still
// works; the fires show after saving.
(function () {
  "use strict";
  const input = document.querySelector("[data-schedule-preview]");
  if (!input) return;
  const zone = document.getElementById("s-timezone");
  const out = document.getElementById("s-cron-preview");
  let timer = null;
  let asked = 0;

  function show(text, bad) {
    out.textContent = text;
    out.classList.toggle("error", Boolean(bad));
  }

  async function preview() {
    const text = input.value.trim();
    if (!text) { show(""); return; }
    const ticket = ++asked;
    const url = new URL(input.dataset.schedulePreview, window.location.href);
    url.searchParams.set("cron", text);
    url.searchParams.set("timezone", (zone && zone.value.trim()) || "UTC");
    try {
      const response = await fetch(url, {headers: {"Accept": "application/json"}});
      const body = await response.json();
      if (ticket !== asked) return;  // an older answer arriving late
      if (!response.ok) { show(body.error ? body.error.message : "cannot read that", true); return; }
      show(`${body.cron} — next: ${body.next_fires_text.slice(0, 3).join(" · ")} (${body.timezone})`);
    } catch (err) {
      if (ticket === asked) show("");
    }
  }

  // A form sent back with the server's word on "when" shows it beside the field: the
  // preview says nothing until the value changes, and then speaks alone.
  const served = document.getElementById("s-cron-error");

  function soon() {
    if (served) served.hidden = true;
    clearTimeout(timer);
    timer = setTimeout(preview, 250);
  }
  input.addEventListener("input", soon);
  if (zone) zone.addEventListener("change", soon);
  if (!served) preview();
})();
