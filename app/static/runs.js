// Commonplace run pages: live progress and log tail on an unfinished run's page, and the
// schedule form's experiment switch. The pages work without this file (reload to see
// progress). Log text is only ever inserted as text nodes: it is whatever a job printed.
"use strict";

(function () {
  var POLL_MS = 1500;
  var MAX_BACKOFF_MS = 15000;
  var LOG_KEEP = 512 * 1024; // characters of log kept in the page

  function getJSON(url) {
    return fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) {
        if (!response.ok) throw new Error("HTTP " + response.status);
        return response.json();
      });
  }

  function setText(id, text) {
    var el = document.getElementById(id);
    if (el && el.textContent !== text) el.textContent = text;
  }

  // Numbers as the server prints them: 4 significant digits, k/M/G above a thousand.
  function formatValue(value) {
    if (typeof value !== "number" || !isFinite(value)) return String(value);
    if (Number.isInteger(value) && Math.abs(value) < 1000) return String(value);
    var units = [[1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]];
    for (var i = 0; i < units.length; i++) {
      if (Math.abs(value) >= units[i][0]) return (value / units[i][0]).toPrecision(3) + " " + units[i][1];
    }
    return String(Number(value.toPrecision(4)));
  }

  function span(seconds) {
    seconds = Math.max(0, Math.floor(seconds));
    if (seconds < 60) return seconds + "s";
    var minutes = Math.floor(seconds / 60);
    seconds = seconds % 60;
    var pad = function (n) { return (n < 10 ? "0" : "") + n; };
    if (minutes < 60) return minutes + "m " + pad(seconds) + "s";
    return Math.floor(minutes / 60) + "h " + pad(minutes % 60) + "m";
  }

  function timeFormatter(zone) {
    try {
      // sv-SE writes dates as 2024-03-27 14:05, the format the server uses.
      return new Intl.DateTimeFormat("sv-SE", {
        timeZone: zone || undefined, year: "numeric", month: "2-digit", day: "2-digit",
        hour: "2-digit", minute: "2-digit", hour12: false,
      });
    } catch (e) {
      return null;
    }
  }

  // -- the run page: poll the API while the run is unfinished -----------------------------
  var root = document.querySelector("[data-live]");
  if (root) {
    var runUrl = root.dataset.runUrl;
    var logUrl = root.dataset.logUrl;
    var offset = parseInt(root.dataset.logOffset || "0", 10) || 0;
    var logEl = document.getElementById("run-log");
    var eventsEl = document.getElementById("run-events");
    var shownEvents = eventsEl ? parseInt(eventsEl.dataset.count || "0", 10) : 0;
    var formatter = timeFormatter(root.dataset.timezone);
    // The statuses as base/statuses.py spells them, written into the page by the server.
    var QUEUED = root.dataset.queued;
    var TERMINAL = (root.dataset.terminal || "").split(" ");
    var delay = POLL_MS;
    var timer = null;
    var busy = false;
    var done = false;

    var showTime = function (iso) {
      if (!iso) return "";
      var date = new Date(iso);
      return formatter ? formatter.format(date) : date.toISOString().slice(0, 16).replace("T", " ");
    };

    var appendLog = function (text) {
      if (!text || !logEl) return;
      var box = document.getElementById("log-box");
      var atBottom = logEl.scrollTop + logEl.clientHeight >= logEl.scrollHeight - 24;
      logEl.appendChild(document.createTextNode(text));
      if (logEl.textContent.length > LOG_KEEP) {
        logEl.textContent = logEl.textContent.slice(-LOG_KEEP); // still plain text
      }
      if (box && !box.open) box.open = true;
      if (atBottom) logEl.scrollTop = logEl.scrollHeight;
    };

    // Read the log from `offset` until caught up (a few requests at most per tick).
    var pullLog = function (rounds) {
      return getJSON(logUrl + "?offset=" + offset).then(function (chunk) {
        appendLog(chunk.data);
        var moved = chunk.offset > offset;
        offset = chunk.offset;
        setText("log-size", (chunk.size / 1000).toFixed(1) + " kB");  // kB as cards write it
        if (moved && chunk.offset < chunk.size && rounds > 1) return pullLog(rounds - 1);
        return chunk;
      });
    };

    var showBadge = function (status) {
      var holder = document.getElementById("run-status");
      var badge = holder && holder.querySelector(".badge");
      if (!badge) return;
      badge.textContent = status.toLowerCase();
      badge.className = "badge run-badge status-" + status.toLowerCase();
      root.dataset.status = status;
    };

    var showProgress = function (run) {
      var p = run.progress || {};
      var step = p.step || 0;
      var total = p.total || 0;
      var bar = document.getElementById("run-progress");
      if (bar) {
        bar.max = total || 1;
        if (total || run.status === QUEUED) {
          bar.value = total ? Math.min(step, total) : 0;
        } else {
          bar.removeAttribute("value"); // started, steps not counted yet: indeterminate
        }
      }
      // the server's words for the run's phase ("loading torch", "step 3 of 40 · warm-up")
      var text = run.progress_text || (run.status === QUEUED ? "queued" : "starting");
      setText("progress-text", text);
      var list = document.getElementById("progress-extras");
      if (list) {
        var rows = document.createDocumentFragment();
        Object.keys(p).forEach(function (key) {
          if (key === "step" || key === "total" || key === "phase") return;
          var item = document.createElement("div");
          var dt = document.createElement("dt");
          var dd = document.createElement("dd");
          dt.textContent = key.replace(/_/g, " ");
          dd.textContent = formatValue(p[key]);
          item.appendChild(dt);
          item.appendChild(dd);
          rows.appendChild(item);
        });
        list.replaceChildren(rows);
      }
      var state = run.cancel_requested ? "cancel requested" :
        (run.status === QUEUED ? "waiting for a runner" : "live");
      setText("live-state", state);
      if (run.started_at) {
        setText("run-duration", span((Date.now() - new Date(run.started_at).getTime()) / 1000));
      }
    };

    var showEvents = function (events) {
      if (!eventsEl || !events) return;
      for (; shownEvents < events.length; shownEvents++) {
        var e = events[shownEvents];
        var row = document.createElement("tr");
        var change = (e.from && e.from !== e.to ? e.from.toLowerCase() + " → " : "");
        var cells = [showTime(e.at), null, e.actor || "", e.reason || ""];
        cells.forEach(function (value, i) {
          var cell = document.createElement("td");
          if (i === 1) {
            cell.className = "transition";
            cell.appendChild(document.createTextNode(change));
            var strong = document.createElement("strong");
            strong.textContent = (e.to || "").toLowerCase();
            cell.appendChild(strong);
          } else {
            cell.textContent = value;
            if (i === 2) cell.className = "who";
          }
          row.appendChild(cell);
        });
        eventsEl.appendChild(row);
      }
    };

    var schedule = function () {
      if (done || timer || document.hidden) return;
      timer = window.setTimeout(tick, delay);
    };

    var finish = function () {
      done = true;
      setText("live-state", "finished");
      // One last read of the log, then the page as the server renders a finished run
      // (result card, correctness, environment). Only this tab's unfinished page reloads.
      pullLog(4).catch(function () {}).then(function () { window.location.reload(); });
    };

    var tick = function () {
      timer = null;
      if (busy || done) return;
      busy = true;
      Promise.all([getJSON(runUrl), pullLog(4)]).then(function (answers) {
        var run = answers[0];
        showBadge(run.status);
        setText("run-reason", run.reason || "");
        showProgress(run);
        showEvents(run.events);
        delay = POLL_MS;
        busy = false;
        if (TERMINAL.indexOf(run.status) >= 0) finish();
        else schedule();
      }).catch(function () {
        busy = false;
        delay = Math.min(delay * 2, MAX_BACKOFF_MS);
        setText("live-state", "reconnecting…");
        schedule();
      });
    };

    // A hidden tab stops asking; it catches up at once when shown again.
    document.addEventListener("visibilitychange", function () {
      if (!document.hidden && !timer && !done) tick();
    });
    if (logEl) logEl.scrollTop = logEl.scrollHeight;
    schedule();
  }

  // -- the schedule form: another experiment means other parameters ----------------------
  document.querySelectorAll("select[data-switch-experiment]").forEach(function (select) {
    select.addEventListener("change", function () {
      var form = select.form;
      // The server sees parameters for another experiment, saves nothing, and answers
      // with the new experiment's defaults to review (the same happens without script).
      if (typeof form.requestSubmit === "function") form.requestSubmit();
      else form.submit();
    });
  });
})();
