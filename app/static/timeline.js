// The run page's timeline (templates/experiments/_run_views.html): tap, click or focus a
// block to read its details in the panel below; zoom and pan along time with the buttons
// (or + and - while the chart has focus). The chart places everything across in
// percentages of its width, so zooming rewrites those percentages (x, width, x1, x2) for
// the window [v0, v1] of the step and draws the time axis again. No styles are set:
// only attributes, classList and textContent (strict CSP).
(function () {
  "use strict";
  var SVG = "http://www.w3.org/2000/svg";

  function pct(v) { return v.toFixed(3) + "%"; }
  function frac(value) { return parseFloat(value) / 100; }

  function setup(figure) {
    var svg = figure.querySelector("svg.tl-chart");
    var output = figure.querySelector(".tl-details");
    if (!svg || !output) return;
    var duration = parseFloat(svg.getAttribute("data-duration-ms")) || 1;
    var axis = svg.querySelector(".tl-axis");
    var view = { v0: 0, v1: 1 };
    var selected = null;

    // Where everything was drawn at 1x, as fractions of the step.
    var items = [];
    svg.querySelectorAll(".tl-rows rect, .tl-rows text.tl-label, .tl-rows line").forEach(function (el) {
      var x = el.getAttribute("x"), x1 = el.getAttribute("x1");
      if (x && x.slice(-1) === "%") {
        var a = frac(x), w = frac(el.getAttribute("width") || el.getAttribute("data-w") || "0");
        items.push({ el: el, a: el.tagName === "text" ? a - w / 2 : a, b: el.tagName === "text" ? a + w / 2 : a + w });
      } else if (x1 && x1.slice(-1) === "%") {
        items.push({ el: el, a: frac(x1), b: frac(el.getAttribute("x2")) });
      }
    });

    function place(t) { return (t - view.v0) / (view.v1 - view.v0) * 100; }

    function drawAxis() {
      var height = svg.getAttribute("height");
      while (axis.firstChild) axis.removeChild(axis.firstChild);
      var from = view.v0 * duration, to = view.v1 * duration, span = to - from;
      var raw = span / 6, base = Math.pow(10, Math.floor(Math.log10(raw)));
      var step = [1, 2, 5, 10].map(function (m) { return m * base; }).find(function (s) { return s >= raw; });
      for (var t = Math.ceil(from / step) * step; t <= to + 1e-9; t += step) {
        var x = place(t / duration);
        var line = document.createElementNS(SVG, "line");
        line.setAttribute("class", "tl-tick");
        line.setAttribute("x1", pct(x)); line.setAttribute("x2", pct(x));
        line.setAttribute("y1", "18"); line.setAttribute("y2", height);
        var label = document.createElementNS(SVG, "text");
        label.setAttribute("class", "tl-tick-label");
        label.setAttribute("x", pct(x)); label.setAttribute("y", "13");
        label.setAttribute("text-anchor", x > 92 ? "end" : x < 3 ? "start" : "middle");
        label.textContent = parseFloat(t.toPrecision(6)) + " ms";
        axis.appendChild(line); axis.appendChild(label);
      }
    }

    function apply() {
      var width = svg.getBoundingClientRect().width || 1;
      var scale = 1 / (view.v1 - view.v0);
      items.forEach(function (it) {
        var a = place(it.a), b = place(it.b), el = it.el;
        if (el.tagName === "line") {
          el.setAttribute("x1", pct(a)); el.setAttribute("x2", pct(b));
        } else if (el.tagName === "text") {
          el.setAttribute("x", pct((a + b) / 2));
          var fits = (b - a) / 100 * width >= el.textContent.length * 7.5 + 6;
          el.classList.toggle("tl-hide", !fits || b < 0 || a > 100);
        } else {
          el.setAttribute("x", pct(a));
          el.setAttribute("width", pct(Math.max(b - a, 0.05)));
        }
      });
      drawAxis();
      var level = figure.querySelector(".tl-zoom-level");
      if (level) {
        level.textContent = scale > 1.001 ? (Math.round(scale * 10) / 10) + "× · " +
          (view.v0 * duration).toFixed(2) + "–" + (view.v1 * duration).toFixed(2) + " ms" : "";
      }
    }

    function zoom(how) {
      var span = view.v1 - view.v0, mid = (view.v0 + view.v1) / 2;
      if (how === "in" && selected) {
        var hit = items.find(function (it) { return it.el === selected; });
        if (hit) mid = (hit.a + hit.b) / 2;
      }
      if (how === "in") span = Math.max(span / 2, 1 / 256);
      if (how === "out") span = Math.min(span * 2, 1);
      if (how === "left") mid -= span / 2;
      if (how === "right") mid += span / 2;
      if (how === "fit") { span = 1; mid = 0.5; }
      var v0 = Math.min(Math.max(mid - span / 2, 0), 1 - span);
      view = { v0: v0, v1: v0 + span };
      apply();
    }

    function show(el) {
      if (selected) selected.classList.remove("tl-sel");
      selected = el;
      el.classList.add("tl-sel");
      var title = el.querySelector("title");
      output.textContent = title ? title.textContent : "";
    }

    svg.addEventListener("click", function (ev) {
      var el = ev.target.closest("rect[tabindex]");
      if (el) show(el);
    });
    svg.addEventListener("focusin", function (ev) {
      var el = ev.target.closest("rect[tabindex]");
      if (el) show(el);
    });
    svg.addEventListener("keydown", function (ev) {
      var el = ev.target.closest("rect[tabindex]");
      if (el && (ev.key === "Enter" || ev.key === " ")) { ev.preventDefault(); show(el); }
      if (ev.key === "+" || ev.key === "=") zoom("in");
      if (ev.key === "-") zoom("out");
    });

    var controls = figure.querySelector(".tl-zoom");
    if (controls) {
      controls.hidden = false;
      controls.addEventListener("click", function (ev) {
        var button = ev.target.closest("button[data-zoom]");
        if (button) zoom(button.getAttribute("data-zoom"));
      });
    }
    window.addEventListener("resize", apply);
    apply();
  }

  document.querySelectorAll("[data-timeline]").forEach(setup);
})();
