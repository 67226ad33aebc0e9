/* The sharding view (app/journal/views/sharding.py): a tile tapped, clicked or focused shows
   its details in its panel's <output>, which moves to just below the tile's row so that
   it never covers a tile. The form's strategy switch is radio buttons and CSS, so it needs
   nothing from here; a run page's is links (to the page showing that strategy), and here
   a picked one's panel is fetched alone from the same origin (data-src) and put in place
   of the shown one, focus moved to its heading and the change said in the view's status.
   Without this script (and on hover) every tile still says its owners in its title. The
   details are text only (textContent); the one HTML parsed is a panel the server drew. */
(function () {
  "use strict";

  var FIELDS = [["where", "in"], ["shape", "shape"], ["params", "parameters"],
    ["bytes", "bytes"], ["owners", "owned by"], ["held", "kept in memory"]];

  // A block of a collapsed run points at its row's tile of the same tensor (data-of).
  function source(tile) {
    if (tile.dataset.of === undefined) return tile;
    var row = tile.closest(".shard-row");
    var first = row && row.querySelector(".shard-tiles");
    return (first && first.children[Number(tile.dataset.of)]) || tile;
  }

  function show(tile) {
    var panel = tile.closest(".shard-panel");
    var out = panel && panel.querySelector(".shard-detail");
    if (!out) return;
    var title = document.createElement("strong");
    title.textContent = tile.dataset.name;
    var src = source(tile);
    var data = src.dataset;
    var layer = src === tile ? null : tile.closest(".shard-layer");
    var head = layer && layer.querySelector(".shard-layer-head");
    var list = document.createElement("dl");
    FIELDS.forEach(function (field) {
      var dt = document.createElement("dt");
      var dd = document.createElement("dd");
      dt.textContent = field[1];
      dd.textContent = field[0] === "where" && head ? head.textContent :
        data[field[0]] || "";
      list.append(dt, dd);
    });
    var dt = document.createElement("dt");
    dt.textContent = "communicated";
    var dd = document.createElement("dd");
    var lines = document.createElement("ul");
    (data.comm || "").split(" ¶ ").forEach(function (line) {
      var li = document.createElement("li");
      li.textContent = line;
      lines.append(li);
    });
    dd.append(lines);
    list.append(dt, dd);
    out.replaceChildren(title, list);
    var row = tile.closest(".shard-tiles");
    if (row && row.nextElementSibling !== out) row.after(out);
    panel.querySelectorAll(".shard-tile.chosen").forEach(function (t) {
      t.classList.remove("chosen");
      t.setAttribute("aria-pressed", "false");
    });
    tile.classList.add("chosen");
    tile.setAttribute("aria-pressed", "true");
  }

  function tileOf(event) {
    return event.target.closest ? event.target.closest(".sharding .shard-tile") : null;
  }

  var fetched = {};  // data-src → the panel's HTML, so switching back costs nothing

  function panelText(url) {
    if (fetched[url]) return Promise.resolve(fetched[url]);
    return fetch(url, {credentials: "same-origin", headers: {Accept: "text/html"}})
      .then(function (response) {
        if (!response.ok) throw new Error(response.status + " " + url);
        return response.text();
      }).then(function (text) {
        fetched[url] = text;
        return text;
      });
  }

  function pick(link) {
    var view = link.closest(".sharding");
    var slot = view.querySelector(".shard-slot");
    var status = view.querySelector(".shard-status");
    status.textContent = "Loading " + link.textContent + "…";
    panelText(link.dataset.src).then(function (text) {
      var doc = new DOMParser().parseFromString(text, "text/html");
      var panel = doc.querySelector(".shard-panel");
      if (!panel) throw new Error("no panel in " + link.dataset.src);
      slot.replaceChildren(document.adoptNode(panel));
      view.querySelectorAll(".shard-links a").forEach(function (a) {
        a.removeAttribute("aria-current");
      });
      link.setAttribute("aria-current", "true");
      status.textContent = "Showing " + link.textContent + ".";
      var heading = panel.querySelector("h3");
      heading.tabIndex = -1;
      heading.focus();
      history.replaceState(history.state, "", link.href);
    }).catch(function () {
      window.location.assign(link.href);  // the page that shows it, as without a script
    });
  }

  document.addEventListener("click", function (event) {
    var link = event.target.closest && event.target.closest(".sharding .shard-links a");
    if (link && link.dataset.src && event.button === 0 && !(event.ctrlKey ||
        event.metaKey || event.shiftKey || event.altKey)) {
      event.preventDefault();
      pick(link);
      return;
    }
    var tile = tileOf(event);
    if (tile) show(tile);
  });
  document.addEventListener("focusin", function (event) {
    var tile = tileOf(event);
    if (tile) show(tile);
  });
})();
