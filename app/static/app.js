// Commonplace: keyboard shortcuts, editor preview and attachments.
// Every form works without this file; it only adds conveniences. (CSP: no inline script.)
"use strict";

(function () {
  function isTyping(el) {
    if (!el) return false;
    var tag = el.tagName;
    return tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT" || el.isContentEditable;
  }

  function submitForm(form) {
    form.dataset.submitting = "1";
    if (typeof form.requestSubmit === "function") form.requestSubmit();
    else form.submit();
  }

  // -- shortcuts: "/" search, "n" new entry, Ctrl/Cmd-Enter save -------------------------
  document.addEventListener("keydown", function (event) {
    if ((event.ctrlKey || event.metaKey) && event.key === "Enter") {
      var form = event.target.closest && event.target.closest("form[data-hotkey-submit]");
      if (!form) form = document.querySelector("form[data-hotkey-submit].editor");
      if (form) {
        event.preventDefault();
        submitForm(form);
      }
      return;
    }
    if (event.ctrlKey || event.metaKey || event.altKey || isTyping(event.target)) return;
    if (event.key === "/") {
      var search = document.getElementById("q") || document.getElementById("site-search");
      if (search) {
        event.preventDefault();
        search.focus();
        search.select();
      }
    } else if (event.key === "n") {
      var link = document.getElementById("new-entry-link");
      if (link) {
        event.preventDefault();
        window.location.href = link.href;
      }
    }
  });

  // -- leaving an editor with unsaved text asks first --------------------------------------
  document.querySelectorAll("form[data-guard]").forEach(function (form) {
    form.addEventListener("input", function () { form.dataset.dirty = "1"; });
    form.addEventListener("submit", function () { form.dataset.submitting = "1"; });
  });
  window.addEventListener("beforeunload", function (event) {
    var dirty = document.querySelector("form[data-guard][data-dirty]:not([data-submitting])");
    if (dirty) {
      event.preventDefault();
      event.returnValue = "";
    }
  });

  // -- preview: the server renders exactly what a save would store ------------------------
  var tabs = document.querySelector("[data-preview-tabs]");
  var body = document.getElementById("f-body");
  var preview = document.getElementById("preview");
  if (tabs && body && preview) {
    tabs.hidden = false;
    var writeButton = tabs.querySelector("[data-show=write]");
    var previewButton = tabs.querySelector("[data-show=preview]");
    var showWrite = function () {
      preview.hidden = true;
      body.hidden = false;
      writeButton.setAttribute("aria-pressed", "true");
      previewButton.setAttribute("aria-pressed", "false");
      body.focus();
    };
    var showPreview = function () {
      var data = new FormData();
      data.append("body", body.value);
      preview.textContent = "Rendering…";
      preview.hidden = false;
      body.hidden = true;
      writeButton.setAttribute("aria-pressed", "false");
      previewButton.setAttribute("aria-pressed", "true");
      fetch(previewButton.dataset.previewUrl, { method: "POST", body: data, credentials: "same-origin" })
        .then(function (response) {
          return response.text().then(function (text) {
            if (!response.ok) throw new Error("Preview failed (" + response.status + ")");
            // Sanitized on the server by the same pipeline that renders saved entries.
            preview.innerHTML = text;
          });
        })
        .catch(function (error) {
          preview.textContent = error.message || "Preview failed";
        });
    };
    writeButton.addEventListener("click", showWrite);
    previewButton.addEventListener("click", showPreview);
  }

  // -- attachments: upload, then put the returned markdown at the cursor -------------------
  var attach = document.querySelector("[data-attach]");
  if (attach && body) {
    attach.hidden = false;
    var input = attach.querySelector("input[type=file]");
    var status = attach.querySelector("[data-attach-status]");
    input.addEventListener("change", function () {
      var file = input.files && input.files[0];
      if (!file) return;
      var data = new FormData();
      data.append("file", file, file.name);
      status.textContent = "Uploading " + file.name + "…";
      fetch(attach.dataset.uploadUrl, { method: "POST", body: data, credentials: "same-origin" })
        .then(function (response) {
          return response.json().catch(function () { return {}; }).then(function (json) {
            if (!response.ok) {
              var message = json.error && json.error.message;
              throw new Error(message || "Upload failed (" + response.status + ")");
            }
            insertAtCursor(body, json.markdown);
            status.textContent = "Attached " + file.name + ".";
          });
        })
        .catch(function (error) {
          status.textContent = error.message || "Upload failed";
        })
        .then(function () { input.value = ""; });
    });
  }

  function insertAtCursor(textarea, text) {
    var start = textarea.selectionStart, end = textarea.selectionEnd;
    var before = textarea.value.slice(0, start), after = textarea.value.slice(end);
    var lead = before && !/\n$/.test(before) ? "\n" : "";
    var insert = lead + text + "\n";
    textarea.value = before + insert + after;
    var caret = start + insert.length;
    textarea.setSelectionRange(caret, caret);
    textarea.dispatchEvent(new Event("input", { bubbles: true }));
    if (!textarea.hidden) textarea.focus();
  }
})();
