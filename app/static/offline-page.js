// Commonplace offline: installs the service worker (sw.js, served at /sw.js), says on the
// page what it keeps and how old that is, lists the writes waiting to be sent, and asks it
// to send them when the browser is back online. Rendered here (CSP: no inline script).
"use strict";

(function () {
  if (!("serviceWorker" in navigator)) return;
  var RESOLVING = "commonplace-resolving";  // sessionStorage: the write sent to the merge view
  var footer = document.querySelector("footer.site");
  var login = footer ? footer.dataset.login || "" : "";

  function ask(message) {
    return navigator.serviceWorker.ready.then(function (registration) {
      var worker = navigator.serviceWorker.controller || registration.active;
      return new Promise(function (resolve) {
        var channel = new MessageChannel();
        channel.port1.onmessage = function (event) { resolve(event.data); };
        message.url = window.location.href;
        worker.postMessage(message, [channel.port2]);
      });
    });
  }

  function age(ms) {
    var minutes = Math.round((Date.now() - ms) / 60000);
    if (minutes < 1) return "just now";
    if (minutes < 60) return minutes + " min ago";
    if (minutes < 60 * 36) return Math.round(minutes / 60) + " h ago";
    return Math.round(minutes / 1440) + " days ago";
  }

  function el(tag, text, className) {
    var node = document.createElement(tag);
    if (text) node.textContent = text;
    if (className) node.className = className;
    return node;
  }

  function button(text, onClick) {
    var node = el("button", text, "quiet");
    node.type = "button";
    node.addEventListener("click", onClick);
    return node;
  }

  function plural(n, one, many) { return n + " " + (n === 1 ? one : many); }

  // -- a write waiting, as a line of a list -------------------------------------------------

  function describe(record) {
    var title = record.fields.title || (record.fields.body || "").split("\n")[0] || "Untitled";
    var what = record.kind === "create" ? "New entry" : "Edit";
    var state = {
      pending: "waiting to be sent",
      conflict: "changed on the server meanwhile: open the merge view to keep both",
      refused: "not accepted: " + record.message,
    }[record.state];
    return what + " “" + title + "” · " + state;
  }

  function resolve(record) {
    // The same form the edit page posts: the server's three-way merge answers with its
    // merge view, theirs beside this text, nothing dropped.
    var form = el("form");
    form.method = "post";
    form.action = "/entries/" + record.entry_id + "/edit";
    form.hidden = true;
    var fields = Object.assign({ base_revision: String(record.base_revision) }, record.fields);
    Object.keys(fields).forEach(function (name) {
      if (name === "publish" && !fields.publish) return;  // an unticked box is not sent
      var input = el("input");
      input.type = "hidden";
      input.name = name;
      input.value = name === "publish" ? "on" : fields[name];
      form.appendChild(input);
    });
    document.body.appendChild(form);
    sessionStorage.setItem(RESOLVING, record.key);
    form.submit();
  }

  function pendingItem(record) {
    var item = el("li", describe(record), "pending-" + record.state);
    item.dataset.key = record.key;
    if (record.state === "conflict") {
      item.appendChild(button("Merge", function () { resolve(record); }));
    }
    if (record.state === "refused") {
      var text = el("pre", record.fields.body || "", "pending-text");
      item.appendChild(text);
      item.appendChild(button("Discard", function () {
        ask({ type: "discard", key: record.key }).then(render);
      }));
    }
    return item;
  }

  // -- the banner, the footer's line, the offline page's lists ------------------------------

  function banner() {
    var node = document.getElementById("offline-banner");
    if (!node) {
      node = el("div", "", "offline-banner");
      node.id = "offline-banner";
      node.setAttribute("role", "status");
      var main = document.getElementById("main");
      main.parentNode.insertBefore(node, main);
    }
    return node;
  }

  function renderBanner(status) {
    var offline = !navigator.onLine || status.this_page !== null;
    var pending = status.pending || [];
    var node = banner();
    node.textContent = "";
    node.hidden = !(offline || pending.length || status.others);
    if (node.hidden) return;
    var lines = el("p");
    if (offline) {
      lines.appendChild(el("strong", navigator.onLine ? "The notebook did not answer. "
                                                       : "Offline. "));
      if (status.this_page) lines.appendChild(document.createTextNode(
        "This page is the copy kept on this device " + age(status.this_page) + ". "));
    }
    if (status.refreshed_at) lines.appendChild(document.createTextNode(
      plural(status.kept.length, "page", "pages") + " kept for reading, refreshed " +
      age(status.refreshed_at) + ". "));
    if (pending.length) {
      var count = el("span", plural(pending.length, "write", "writes") +
                     " waiting to be sent.", "pending-count");
      lines.appendChild(count);
    }
    if (status.others) lines.appendChild(document.createTextNode(
      " " + plural(status.others, "write", "writes") + " of another sign-in are kept here " +
      "and sent only when it signs in again."));
    node.appendChild(lines);
    if (pending.length) {
      var list = el("ul", "", "pending-list");
      pending.forEach(function (record) { list.appendChild(pendingItem(record)); });
      node.appendChild(list);
    }
  }

  function renderFooter(status) {
    if (!footer) return;
    var line = document.getElementById("offline-copy");
    if (!line) {
      line = el("li");
      line.id = "offline-copy";
      footer.querySelector("ul").appendChild(line);
    }
    line.textContent = status.refreshed_at
      ? "Offline copy: " + plural(status.kept.length, "page", "pages") + ", refreshed " +
        age(status.refreshed_at) + " "
      : "Offline copy: none yet ";
    if (status.refreshed_at) {
      line.appendChild(button("Forget", function () {
        ask({ type: "forget" }).then(render);
      }));
    }
  }

  function renderOfflinePage(status) {
    var kept = document.getElementById("offline-kept");
    if (kept) {
      var readable = status.kept.filter(function (page) {
        return page.title && new URL(page.url).pathname !== "/offline";
      });
      kept.textContent = "";
      if (!readable.length) kept.appendChild(el("li", "Nothing is kept on this device yet.", "muted"));
      readable.sort(function (a, b) { return a.title.localeCompare(b.title); })
        .forEach(function (page) {
          var item = el("li");
          var link = el("a", page.title);
          link.href = page.url;
          item.appendChild(link);
          item.appendChild(el("span", " · kept " + age(page.at), "muted"));
          kept.appendChild(item);
        });
    }
    var section = document.getElementById("offline-pending");
    if (section) {
      var list = section.querySelector("ul");
      list.textContent = "";
      (status.pending || []).forEach(function (record) { list.appendChild(pendingItem(record)); });
      section.hidden = !(status.pending || []).length;
    }
  }

  // The browser says "online" when the device has a network; the tailnet may take a few
  // seconds more (a relay, a login), and a server may be restarting: while writes wait,
  // ask again, less and less often.
  var FIRST_RETRY_MS = 2000;
  var retryMs = FIRST_RETRY_MS;
  var retryTimer = null;

  function flush() {
    return ask({ type: "flush" }).then(render);
  }

  function retryLater(status) {
    clearTimeout(retryTimer);
    // Another login's writes wait only while the server is out of reach: once it answers,
    // it has said who this device is, and they wait for that login to come back.
    var waiting = (status.pending || []).some(function (r) { return r.state === "pending"; }) ||
      (status.others > 0 && status.reachable === false);
    if (!waiting || !navigator.onLine) {
      retryMs = FIRST_RETRY_MS;
      return;
    }
    retryTimer = setTimeout(flush, retryMs);
    retryMs = Math.min(retryMs * 2, 60000);
  }

  // The new-entry form kept days ago still shows the day it was kept: a capture written
  // from the copy is of today (the device's), unless the date was changed by hand.
  function freshenDate(status) {
    var date = document.querySelector("form.editor:not([data-dated]) input[name=date]");
    if (!date || status.this_page === null || document.querySelector("input[name=base_revision]")) {
      return;
    }
    date.form.dataset.dated = "1";
    var now = new Date();
    var today = new Date(now.getTime() - now.getTimezoneOffset() * 60000).toISOString().slice(0, 10);
    if (date.value === date.defaultValue) date.value = today;
  }

  function render(status) {
    if (!status || status.error) return;
    freshenDate(status);
    renderBanner(status);
    renderFooter(status);
    renderOfflinePage(status);
    retryLater(status);
    document.documentElement.dataset.offlineReady = status.refreshed_at ? "kept" : "none";
  }

  // -- a write taken to the merge view: gone from the device once the owner saves there ----

  var resolving = sessionStorage.getItem(RESOLVING);
  if (resolving) {
    sessionStorage.removeItem(RESOLVING);
    var editor = document.querySelector("form.editor[data-guard]");
    // Told at once, without waiting for an answer: the page is leaving.
    var done = function () {
      var worker = navigator.serviceWorker.controller;
      if (worker) worker.postMessage({ type: "discard", key: resolving });
    };
    if (editor) editor.addEventListener("submit", done);  // the merge view (or the form again)
    else done();  // the server merged it cleanly after all
  }

  navigator.serviceWorker.register("/sw.js", { scope: "/", updateViaCache: "none" }).catch(function () {});
  navigator.serviceWorker.addEventListener("message", function (event) {
    if (event.data && event.data.type === "changed") ask({ type: "status" }).then(render);
  });
  function hello() {
    ask({ type: "hello", login: login, online: navigator.onLine }).then(render);
  }
  if (navigator.serviceWorker.controller) hello();
  else navigator.serviceWorker.addEventListener("controllerchange", hello, { once: true });
  window.addEventListener("online", function () {
    retryMs = FIRST_RETRY_MS;
    flush();
  });
  window.addEventListener("offline", function () { ask({ type: "status" }).then(render); });
})();
