// Commonplace's editor, on top of a plain textarea that works without it:
//   - Write / Preview tabs on a narrow screen, text and live preview side by side on a wide one
//   - "[[" completes titles, weeks and dates ("[[Title#" that note's headings, "[[#" this
//     note's own); "![[" files, then the same; "#" completes tags (GET /api/v1/complete)
//   - attaching, pasting or dropping a file uploads it and puts its markdown at the cursor;
//     a new entry is first saved as a draft, so the file has an entry to belong to
// The preview is rendered by the server, by the pipeline that renders saved entries.
"use strict";

(function () {
  var body = document.getElementById("f-body");
  var form = body && body.closest("form.editor");
  if (!form) return;

  // Inserting through the browser's editing command keeps Ctrl-Z working; where it is
  // missing, setRangeText does the same without the undo step.
  function replaceRange(start, end, text) {
    body.focus();
    body.setSelectionRange(start, end);
    var done = false;
    try { done = document.execCommand("insertText", false, text); } catch (e) { done = false; }
    if (!done || body.value.slice(start, start + text.length) !== text) {
      body.setRangeText(text, start, end, "end");
      body.dispatchEvent(new Event("input", { bubbles: true }));
    }
  }

  function debounce(fn, ms) {
    var timer = null;
    return function () {
      clearTimeout(timer);
      timer = setTimeout(fn, ms);
    };
  }

  // -- preview ------------------------------------------------------------------------------
  var tabs = document.querySelector("[data-preview-tabs]");
  var preview = document.getElementById("preview");
  var wide = window.matchMedia("(min-width: 62rem)");
  var rendered = null;  // the text the preview shows
  var pending = null;

  function render() {
    if (rendered === body.value) return;
    var text = body.value;
    if (pending) pending.abort();
    pending = new AbortController();
    var data = new FormData();
    data.append("body", text);
    if (rendered === null) preview.textContent = "Rendering…";
    fetch(body.dataset.previewUrl, { method: "POST", body: data, credentials: "same-origin",
                                     signal: pending.signal })
      .then(function (response) {
        return response.text().then(function (html) {
          if (!response.ok) throw new Error("Preview failed (" + response.status + ")");
          // Sanitized on the server by the same pipeline that renders saved entries.
          preview.innerHTML = html;
          rendered = text;
        });
      })
      .catch(function (error) {
        if (error.name !== "AbortError") preview.textContent = error.message || "Preview failed";
      });
  }

  var view = "write";

  // "write", "preview", or "split" (side by side, wide screens only).
  function show(which, focus) {
    view = which;
    tabs.querySelectorAll("button").forEach(function (button) {
      button.setAttribute("aria-pressed", button.dataset.show === which ? "true" : "false");
    });
    form.classList.toggle("split", which === "split");
    body.hidden = which === "preview";
    preview.hidden = which === "write";
    if (which !== "write") render();
    if (which !== "preview" && focus) body.focus();
  }

  if (tabs && preview) {
    tabs.hidden = false;
    tabs.addEventListener("click", function (event) {
      var button = event.target.closest("button[data-show]");
      if (button) show(button.dataset.show, true);
    });
    body.addEventListener("input", debounce(function () {
      if (view === "split") render();
    }, 400));
    wide.addEventListener("change", function () {
      if (wide.matches && view === "write") show("split");
      else if (!wide.matches && view === "split") show("write");
    });
    show(wide.matches ? "split" : "write");  // no focus: the page decides where you start
  }

  // -- completion: [[ links and #tags --------------------------------------------------------
  var list = document.createElement("ul");
  list.id = "completions";
  list.className = "completions";
  list.setAttribute("role", "listbox");
  list.setAttribute("aria-label", "Suggestions");
  list.hidden = true;
  body.parentNode.appendChild(list);
  body.setAttribute("aria-autocomplete", "list");
  body.setAttribute("aria-controls", list.id);

  var LINK_RE = /\[\[([^\[\]|\n]{0,100})$/;
  var TAG_RE = /(?:^|[\s(])#([\p{L}][\p{L}\p{N}_\/-]{0,49})?$/u;
  var state = null;  // {kind, prefix, start, items, active}
  var asking = null;

  function context() {
    var caret = body.selectionStart;
    if (caret !== body.selectionEnd) return null;
    var before = body.value.slice(Math.max(0, caret - 120), caret);
    var m = LINK_RE.exec(before);
    if (m) {
      var embed = before.charAt(before.length - m[0].length - 1) === "!";
      return { kind: embed ? "embed" : "link", prefix: m[1], start: caret - m[1].length,
               caret: caret };
    }
    m = TAG_RE.exec(before);
    if (m) {
      var prefix = m[1] || "";
      return { kind: "tag", prefix: prefix, start: caret - prefix.length, caret: caret };
    }
    return null;
  }

  function close() {
    state = null;
    list.hidden = true;
    list.textContent = "";
    body.removeAttribute("aria-activedescendant");
  }

  function choose(index) {
    if (!state) return;
    state.active = index;
    Array.prototype.forEach.call(list.children, function (li, i) {
      li.setAttribute("aria-selected", i === index ? "true" : "false");
    });
    var option = list.children[index];
    if (option && option.id) {
      body.setAttribute("aria-activedescendant", option.id);
      option.scrollIntoView({ block: "nearest" });
    } else {
      body.removeAttribute("aria-activedescendant");
    }
  }

  function accept(index) {
    var item = state && state.items[index];
    if (!item) return false;
    var at = state;
    close();
    if (at.kind !== "tag") {
      var closed = body.value.slice(at.caret, at.caret + 2) === "]]";
      replaceRange(at.start, at.caret + (closed ? 2 : 0), item.insert + "]]");
    } else {
      replaceRange(at.start, at.caret, item.insert + " ");
    }
    return true;
  }

  // Where the caret is drawn: a hidden copy of the textarea's text up to the caret.
  function caretPoint(position) {
    var style = window.getComputedStyle(body);
    var mirror = document.createElement("div");
    ["boxSizing", "width", "paddingTop", "paddingRight", "paddingBottom", "paddingLeft",
     "borderTopWidth", "borderRightWidth", "borderBottomWidth", "borderLeftWidth",
     "fontFamily", "fontSize", "fontWeight", "lineHeight", "letterSpacing", "tabSize",
     "textTransform", "wordSpacing"].forEach(function (name) { mirror.style[name] = style[name]; });
    mirror.style.position = "absolute";
    mirror.style.visibility = "hidden";
    mirror.style.whiteSpace = "pre-wrap";
    mirror.style.overflowWrap = "break-word";
    mirror.style.top = "0";
    mirror.style.left = "0";
    mirror.textContent = body.value.slice(0, position);
    var mark = document.createElement("span");
    mark.textContent = "\u200b";
    mirror.appendChild(mark);
    body.parentNode.appendChild(mirror);
    var point = { top: mark.offsetTop, left: mark.offsetLeft, height: mark.offsetHeight };
    mirror.remove();
    return point;
  }

  function place() {
    var point = caretPoint(state.start);
    var top = body.offsetTop + point.top + point.height - body.scrollTop + 4;
    var room = body.parentNode.clientWidth - list.offsetWidth;
    list.style.top = Math.max(0, top) + "px";
    list.style.left = Math.max(0, Math.min(body.offsetLeft + point.left, room)) + "px";
  }

  function showItems(at, items) {
    state = { kind: at.kind, prefix: at.prefix, start: at.start, caret: at.caret,
              items: items, active: -1 };
    list.textContent = "";
    items.forEach(function (item, i) {
      var li = document.createElement("li");
      li.id = "completion-" + i;
      li.setAttribute("role", "option");
      var label = document.createElement("span");
      label.className = "label";
      label.textContent = item.label;
      var detail = document.createElement("span");
      detail.className = "detail";
      detail.textContent = item.detail;
      li.append(label, detail);
      li.addEventListener("mousedown", function (event) { event.preventDefault(); });
      li.addEventListener("click", function () { accept(i); });
      list.appendChild(li);
    });
    if (!items.length) {
      var none = document.createElement("li");
      none.className = "empty";
      none.textContent = at.kind === "tag" ? "A new tag"
        : at.prefix.indexOf("#") !== -1 ? "No heading by that name"
        : "No page by that name yet: ]] makes a link to create it";
      list.appendChild(none);
    }
    list.hidden = false;
    place();
    // A "#" alone may be a heading: Enter stays a new line until you pick a tag.
    choose(items.length && (at.kind !== "tag" || at.prefix) ? 0 : -1);
  }

  // "[[#": the headings of the text being written, saved or not.
  var HEADING_RE = /^ {0,3}#{1,6}[ \t]+(.*)$/gm;
  function headingText(line) {  // less a closing run of "#" (by hand: no backtracking)
    var text = line.trim(), end = text.length;
    while (end && text.charAt(end - 1) === "#") end--;
    return end < text.length && (end === 0 || " \t".indexOf(text.charAt(end - 1)) !== -1)
      ? text.slice(0, end).trim() : text;
  }
  function ownHeadings(text) {
    var want = text.toLowerCase(), seen = {}, items = [], m;
    HEADING_RE.lastIndex = 0;
    while ((m = HEADING_RE.exec(body.value)) && items.length < 8) {
      var heading = headingText(m[1]);
      if (seen[heading] || heading.toLowerCase().indexOf(want) === -1) continue;
      seen[heading] = true;
      items.push({ insert: "#" + heading, label: heading, detail: "heading here", kind: "heading" });
    }
    return items;
  }

  var ask = debounce(function () {
    var at = context();
    if (!at) { close(); return; }
    if (at.kind !== "tag" && at.prefix.charAt(0) === "#") {
      if (asking) asking.abort();
      showItems(at, ownHeadings(at.prefix.slice(1)));
      return;
    }
    if (asking) asking.abort();
    asking = new AbortController();
    var url = body.dataset.completeUrl + "?kind=" + at.kind + "&prefix=" +
              encodeURIComponent(at.prefix) + "&limit=8";
    fetch(url, { credentials: "same-origin", signal: asking.signal,
                 headers: { Accept: "application/json" } })
      .then(function (response) {
        if (!response.ok) throw new Error("completion failed");
        return response.json();
      })
      .then(function (answer) {
        var now = context();  // still typing the same thing?
        if (now && now.kind === at.kind && now.start === at.start) showItems(now, answer.items);
      })
      .catch(function (error) { if (error.name !== "AbortError") close(); });
  }, 120);

  body.addEventListener("input", function () {
    if (context()) ask();
    else close();
  });
  body.addEventListener("blur", close);
  body.addEventListener("click", function () { if (state && !context()) close(); });
  body.addEventListener("keydown", function (event) {
    if (!state || list.hidden) return;
    var count = state.items.length;
    if (event.key === "ArrowDown" && count) {
      event.preventDefault();
      choose((state.active + 1) % count);
    } else if (event.key === "ArrowUp" && count) {
      event.preventDefault();
      choose((state.active - 1 + count) % count);
    } else if ((event.key === "Enter" || event.key === "Tab") && state.active >= 0 &&
               !event.ctrlKey && !event.metaKey && !event.shiftKey) {
      event.preventDefault();
      accept(state.active);
    } else if (event.key === "Escape") {
      event.preventDefault();
      close();
    }
  });

  // -- attachments: picked, pasted or dropped ------------------------------------------------
  var attach = document.querySelector("[data-attach]");
  var status = attach && attach.querySelector("[data-attach-status]");
  var picker = attach && attach.querySelector("input[type=file]");
  var entryReady = null;  // a promise of the upload URL

  function say(text) { if (status) status.textContent = text; }

  function errorOf(response, json, what) {
    var message = json && json.error && json.error.message;
    return new Error(message || what + " failed (" + response.status + ")");
  }

  // A new entry has no id yet: save what is written as a draft, then carry on editing it.
  function uploadUrl() {
    if (attach.dataset.uploadUrl) return Promise.resolve(attach.dataset.uploadUrl);
    if (entryReady) return entryReady;
    var fields = form.elements;
    var draft = {
      title: fields.title.value.trim() || "Untitled " + (fields.date.value || "note"),
      body: body.value,
      tags: fields.tags.value.split(/[\s,]+/).filter(Boolean),
      status: "draft",
    };
    if (fields.date.value) draft.date = fields.date.value;
    say("Saving a draft first, so the file has an entry to belong to…");
    entryReady = fetch(attach.dataset.draftUrl, {
      method: "POST", credentials: "same-origin", body: JSON.stringify(draft),
      headers: { "Content-Type": "application/json", Accept: "application/json" },
    }).then(function (response) {
      return response.json().catch(function () { return {}; }).then(function (json) {
        if (!response.ok) throw errorOf(response, json, "Saving the draft");
        var edit = attach.dataset.editUrl.replace("/0/", "/" + json.id + "/");
        form.action = edit;
        var base = document.createElement("input");
        base.type = "hidden";
        base.name = "base_revision";
        base.value = json.revision;
        form.appendChild(base);
        attach.dataset.uploadUrl = attach.dataset.uploadTemplate.replace("/0/", "/" + json.id + "/");
        window.history.replaceState(null, "", edit);
        return attach.dataset.uploadUrl;
      });
    });
    entryReady.catch(function () { entryReady = null; });
    return entryReady;
  }

  var uploads = 0;
  var uploading = 0;  // in flight: saving now would store the placeholder, not the file

  form.addEventListener("submit", function (event) {
    if (!uploading) return;
    event.preventDefault();
    delete form.dataset.submitting;
    say("Still uploading — save again when it is done.");
  });

  function upload(file) {
    uploads += 1;
    var name = file.name || "pasted";
    var holder = "![Uploading " + name.replace(/[\[\]]/g, "") + " (" + uploads + ")…]()";
    var caret = body.selectionStart;
    var lead = caret > 0 && body.value[caret - 1] !== "\n" ? "\n" : "";
    replaceRange(caret, body.selectionEnd, lead + holder + "\n");
    say("Uploading " + name + "…");
    uploading += 1;
    function swap(text) {
      var at = body.value.indexOf(holder);
      if (at === -1) return;
      body.setRangeText(text, at, at + holder.length + (text ? 0 : 1), "preserve");
      body.dispatchEvent(new Event("input", { bubbles: true }));
    }
    return uploadUrl()
      .then(function (url) {
        var data = new FormData();
        data.append("file", file, name);
        return fetch(url, { method: "POST", body: data, credentials: "same-origin",
                            headers: { Accept: "application/json" } });
      })
      .then(function (response) {
        return response.json().catch(function () { return {}; }).then(function (json) {
          if (!response.ok) throw errorOf(response, json, "Upload");
          swap(json.markdown);
          say("Attached " + name + "." + (attach.dataset.draftUrl && !attach.dataset.saidDraft
            ? " The entry is kept as a draft until you save it." : ""));
          if (attach.dataset.draftUrl) attach.dataset.saidDraft = "1";
        });
      })
      .catch(function (error) {
        swap("");
        say(error.message || "Upload failed");
      })
      .then(function () { uploading -= 1; });
  }

  function filesOf(transfer) {
    return transfer && transfer.files ? Array.prototype.slice.call(transfer.files) : [];
  }

  if (attach) {
    attach.hidden = false;
    picker.addEventListener("change", function () {
      filesOf(picker).forEach(upload);
      picker.value = "";
    });
    body.addEventListener("paste", function (event) {
      var files = filesOf(event.clipboardData);
      if (!files.length) return;  // text pastes as text
      event.preventDefault();
      files.forEach(upload);
    });
    body.addEventListener("dragover", function (event) {
      if (event.dataTransfer && Array.prototype.indexOf.call(event.dataTransfer.types, "Files") !== -1) {
        event.preventDefault();
        body.classList.add("dropping");
      }
    });
    body.addEventListener("dragleave", function () { body.classList.remove("dropping"); });
    body.addEventListener("drop", function (event) {
      body.classList.remove("dropping");
      var files = filesOf(event.dataTransfer);
      if (!files.length) return;
      event.preventDefault();
      files.forEach(upload);
    });
  }
})();
