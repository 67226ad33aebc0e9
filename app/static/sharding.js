/* The sharding view (app/journal/views/sharding.py): a tile tapped, clicked or focused shows
   its details in its panel's <output>, which moves to just below the tile's row so that
   it never covers a tile. The strategy switch is radio buttons and CSS, so it needs
   nothing from here; without this script (and on hover) every tile still says its owners
   in its title. Text only (textContent): nothing from the page is parsed as HTML. */
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

  document.addEventListener("click", function (event) {
    var tile = tileOf(event);
    if (tile) show(tile);
  });
  document.addEventListener("focusin", function (event) {
    var tile = tileOf(event);
    if (tile) show(tile);
  });
})();
