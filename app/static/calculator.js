/* The what-if calculator, live: as the inputs change (debounced), ask
   GET /api/v1/calculator and redraw the page's numbers and bars in place (textContent,
   SVG attributes, classList: nothing that the strict CSP refuses). Without this script
   the page's form still works, through the server. */
(function () {
  "use strict";
  const form = document.getElementById("calc-form");
  if (!form) return;
  const out = document.getElementById("calc-out");
  const error = document.getElementById("calc-error");
  const SHAPE = ["layers", "hidden", "heads", "seq_len", "vocab"];
  const MEMORY = ["params", "grads", "optimizer", "activations", "buffers"];
  let timer = 0, asked = 0, controller = null;

  const $ = (sel) => out.querySelector(sel);
  const setText = (el, text) => { if (el) el.textContent = text; };
  const fixed = (n, digits) => n.toLocaleString("en-US",
    { minimumFractionDigits: digits, maximumFractionDigits: digits });

  function size(n) {
    for (const [unit, scale] of [["TB", 1e12], ["GB", 1e9], ["MB", 1e6], ["kB", 1e3]]) {
      if (Math.abs(n) >= scale) return fixed(n / scale, 1) + " " + unit;
    }
    return fixed(n, 0) + " B";
  }
  function seconds(t) {
    if (t >= 1) return fixed(t, 2) + " s";
    if (t >= 1e-3) return fixed(t * 1e3, 1) + " ms";
    return fixed(t * 1e6, 0) + " µs";
  }
  function count(n) {
    for (const [unit, scale] of [["T", 1e12], ["B", 1e9], ["M", 1e6], ["k", 1e3]]) {
      if (n >= scale) return fixed(n / scale, 2) + unit;
    }
    return fixed(n, 0);
  }

  function stack(selector, attr, values, scale) {
    let x = 0;
    out.querySelectorAll(selector).forEach((rect) => {
      const width = 1000 * (values[rect.getAttribute(attr)] || 0) / scale;
      rect.setAttribute("x", x.toFixed(2));
      rect.setAttribute("width", width.toFixed(2));
      x += width;
    });
  }

  function render(a) {
    const mem = a.memory;
    const verdict = $("[data-out=verdict]");
    verdict.classList.toggle("fits", mem.fits);
    verdict.classList.toggle("overflows", !mem.fits);
    setText(verdict, mem.fits ? "Fits: " + size(mem.margin_bytes) + " to spare"
      : "Does not fit by " + size(-mem.margin_bytes));
    const live = document.getElementById("calc-live");
    live.classList.toggle("fits", mem.fits);
    live.classList.toggle("overflows", !mem.fits);
    setText(live, seconds(a.time.step_time_s) + " a step · MFU " + fixed(a.mfu * 100, 1) + "% · "
      + (mem.fits ? "fits, " + size(mem.margin_bytes) + " spare" : "over by " + size(-mem.margin_bytes)));
    setText($("[data-out=step]"), seconds(a.time.step_time_s));
    setText($("[data-out=tokens]"), count(a.time.tokens_per_s));
    setText($("[data-out=mfu]"), fixed(a.mfu * 100, 1) + "%");
    setText($("[data-out=bubble]"), fixed(a.bubble_fraction * 100, 1) + "%");
    setText($("[data-out=params]"), count(a.model.params));
    setText($("[data-out=world]"), String(a.parallel.world_size));
    setText($("[data-out=mem-where]"), size(mem.total_bytes) + " of " + size(a.gpu.memory_bytes)
      + (a.parallel.pp > 1 ? ", stage " + mem.stage + " (the fullest)" : ""));
    setText($("[data-out=bytes-per-param]"), fixed(mem.bytes_per_param, 2) + " B");

    const scale = Math.max(mem.total_bytes, a.gpu.memory_bytes) * 1.04;
    stack("rect[data-mem]", "data-mem", mem.parts_bytes, scale);
    const line = $("[data-out=hbm-line]");
    const hbm = (1000 * a.gpu.memory_bytes / scale).toFixed(2);
    line.setAttribute("x1", hbm);
    line.setAttribute("x2", hbm);
    MEMORY.forEach((part) => setText($('[data-mem-value="' + part + '"]'), size(mem.parts_bytes[part])));

    const terms = a.time.terms_s;
    stack("rect[data-term]", "data-term", terms, a.time.step_time_s);
    out.querySelectorAll("[data-term-row]").forEach((row) => {
      const term = row.getAttribute("data-term-row");
      row.hidden = !terms[term];
      setText(row.querySelector("[data-term-value]"), seconds(terms[term] || 0));
    });
    const dominant = out.querySelector('[data-term-row="' + a.time.dominant + '"] th');
    setText($("[data-out=dominant]"), "mostly " + (dominant ? dominant.textContent : a.time.dominant));

    out.querySelectorAll("[data-comm-row]").forEach((row) => {
      const kind = row.getAttribute("data-comm-row");
      const c = a.communication[kind];
      row.hidden = !c;
      if (!c) return;
      setText(row.querySelector('[data-comm="' + kind + ':where"]'), c.ranks + " ranks, " + c.link);
      setText(row.querySelector('[data-comm="' + kind + ':bytes"]'), size(c.bytes));
      setText(row.querySelector('[data-comm="' + kind + ':count"]'), String(c.count));
      setText(row.querySelector('[data-comm="' + kind + ':time"]'), seconds(c.time_s));
    });
    $("[data-out=no-comm]").hidden = Object.keys(a.communication).length > 0;

    const run = document.getElementById("calc-run");
    run.hidden = !a.lab.ok;
    if (a.lab.ok) {
      const query = new URLSearchParams();
      for (const [key, value] of Object.entries(a.lab.params)) {
        (Array.isArray(value) ? value : [value]).forEach((v) => query.append("param." + key, String(v)));
      }
      run.setAttribute("href", "/experiments/" + a.lab.experiment + "/run?" + query.toString());
      setText(run, "Open the " + a.lab.experiment + " form, prefilled");
    }
    setText(document.getElementById("calc-why"), a.lab.ok ? (a.lab.note ? a.lab.note + "." : "")
      : "Not in the lab: " + a.lab.why + ".");

    const list = document.getElementById("calc-assumptions");
    list.replaceChildren(...a.assumptions.map((line) => {
      const li = document.createElement("li");
      li.textContent = line;
      return li;
    }));
    if (a.inputs.model !== "custom") {
      SHAPE.forEach((name) => { form.elements[name].value = a.inputs[name]; });
      form.elements.namedItem("c-tied").value = String(a.inputs.tied);
    }
  }

  function refused(body) {
    const problem = (body && body.error) || { message: "the calculator did not answer" };
    error.textContent = problem.message;
    error.hidden = false;
    out.classList.add("stale");
    const field = problem.field && form.querySelector('[name="' + problem.field + '"]');
    if (field) field.setAttribute("aria-invalid", "true");
  }

  async function ask() {
    const query = new URLSearchParams(new FormData(form)).toString();
    const mine = ++asked;
    if (controller) controller.abort();
    controller = new AbortController();
    let response, body;
    try {
      response = await fetch("/api/v1/calculator?" + query,
        { headers: { Accept: "application/json" }, signal: controller.signal });
      body = await response.json();
    } catch (exc) {
      if (exc.name !== "AbortError" && mine === asked) refused(null);
      return;
    }
    if (mine !== asked) return;
    form.querySelectorAll("[aria-invalid]").forEach((el) => el.removeAttribute("aria-invalid"));
    if (!response.ok) { refused(body); return; }
    error.hidden = true;
    out.classList.remove("stale");
    render(body);
    history.replaceState(null, "", "?" + query);
  }

  function later() {
    clearTimeout(timer);
    timer = setTimeout(ask, 150);
  }

  function syncSlider(slider) {
    const value = Number(document.getElementById(slider.getAttribute("data-log2-for")).value);
    const exp = Math.log2(value);
    if (Number.isInteger(exp)) slider.value = String(exp);
  }

  form.classList.add("live");
  form.querySelectorAll("[data-log2-for]").forEach((slider) => {
    slider.hidden = false;
    syncSlider(slider);
  });

  form.addEventListener("input", (event) => {
    const el = event.target;
    if (el.hasAttribute("data-log2-for")) {
      document.getElementById(el.getAttribute("data-log2-for")).value = String(2 ** Number(el.value));
    } else if (el.id === "c-model" && el.value !== "custom") {
      const option = el.selectedOptions[0];
      SHAPE.forEach((name) => { form.elements[name].value = option.getAttribute("data-" + name); });
      form.elements.namedItem("c-tied").value = option.getAttribute("data-tied");
    } else if (SHAPE.includes(el.name) || el.id === "c-tied") {
      form.elements.model.value = "custom";
    }
    const slider = form.querySelector('[data-log2-for="' + el.id + '"]');
    if (slider) syncSlider(slider);
    later();
  });
  form.addEventListener("change", (event) => {
    if (event.target.tagName === "SELECT") later();
  });
  form.addEventListener("submit", (event) => { event.preventDefault(); ask(); });
})();
