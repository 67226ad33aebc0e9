// Commonplace: keyboard shortcuts, leaving an unsaved editor, ticking task boxes.
// Every form works without this file; it only adds conveniences. (CSP: no inline script.)
// The editor's own conveniences are in editor.js, loaded by the edit page alone.
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

  // -- shortcuts: "/" search, "n" new entry, Ctrl/Cmd-Enter save, Esc leaves search -------
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
    if (event.key === "Escape" && event.target && event.target.type === "search") {
      event.target.blur();  // back to the page: "/" and "n" work again
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

  // The "/" hint only where there is a keyboard to press it on.
  var siteSearch = document.getElementById("site-search");
  if (siteSearch && siteSearch.dataset.keyHint &&
      window.matchMedia("(hover: hover) and (pointer: fine) and (min-width: 40rem)").matches) {
    siteSearch.placeholder = siteSearch.dataset.keyHint;
  }

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

  // -- task boxes: tick in place instead of reloading the page -----------------------------
  // Each box is a submit button of the entry's tick form (works without script). Here the
  // click becomes a fetch; the answer carries the new revision, which the next tick is
  // made from. Anything but a plain success (a merge happened, a conflict, an error) falls
  // back to the page the server would have shown.
  document.addEventListener("click", function (event) {
    var box = event.target.closest && event.target.closest("button.task-box");
    if (!box || !box.form || box.form.dataset.native) return;
    event.preventDefault();
    if (box.getAttribute("aria-busy") === "true") return;
    var form = box.form;
    var data = new FormData(form);
    data.append(box.name, box.value);
    box.setAttribute("aria-busy", "true");
    fetch(box.formAction, { method: "POST", body: data, credentials: "same-origin",
                            headers: { Accept: "application/json" } })
      .then(function (response) {
        if (!response.ok) throw new Error("tick refused (" + response.status + ")");
        return response.json();
      })
      .then(function (answer) {
        if (answer.merged) {  // someone else saved meanwhile: show the merged text
          window.location.reload();
          return;
        }
        form.elements.base_revision.value = answer.revision;
        box.setAttribute("aria-checked", answer.done ? "true" : "false");
        box.value = answer.done ? "0" : "1";
        box.removeAttribute("aria-busy");
      })
      .catch(function () {
        box.removeAttribute("aria-busy");
        form.dataset.native = "1";  // let the server say it: the merge page or the error
        if (typeof form.requestSubmit === "function") form.requestSubmit(box);
        else box.click();
      });
  });
})();
