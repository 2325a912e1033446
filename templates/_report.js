(function () {
  "use strict";
  // Page script of a dslogs report: embeds the charts, ties the overview brush to every
  // timeline chart, sorts tables, opens drill-downs. The page reads fine without it.
  var root = document.documentElement;
  root.classList.remove("no-js");
  root.classList.add("js");

  var views = {};
  var dslogs = (window.dslogs = { views: views, range: null, ready: null });

  function chartEl(id) { return document.getElementById("chart-" + id); }

  function brushExtent(value) {
    // An interval selection's signal value is {field: [lo, hi]} or {} when cleared.
    if (!value) return null;
    var keys = Object.keys(value);
    if (!keys.length) return null;
    var r = value[keys[0]];
    if (!r || r.length !== 2) return null;
    var lo = +new Date(r[0]), hi = +new Date(r[1]);
    if (!isFinite(lo) || !isFinite(hi) || lo === hi) return null;
    return lo < hi ? [lo, hi] : [hi, lo];
  }

  function fmt(ms) {
    var d = new Date(ms);
    function p(n) { return (n < 10 ? "0" : "") + n; }
    // Chart times are the report zone's wall clock stored on a UTC scale: read them back as UTC.
    return d.getUTCFullYear() + "-" + p(d.getUTCMonth() + 1) + "-" + p(d.getUTCDate()) + " " + p(d.getUTCHours()) + ":" + p(d.getUTCMinutes());
  }

  function setRange(range) {
    dslogs.range = range;
    var jobs = Object.keys(views).map(function (id) {
      var el = chartEl(id);
      if (!el || el.getAttribute("data-timeline") !== "1") return null;
      return views[id].signal("time_range", range).runAsync();
    });
    var label = document.getElementById("range-label");
    if (label) {
      label.textContent = "";
      label.appendChild(document.createTextNode("Showing "));
      var b = document.createElement("b");
      b.textContent = range ? fmt(range[0]) + " → " + fmt(range[1]) : "the whole window";
      label.appendChild(b);
      var zone = label.getAttribute("data-zone");
      if (zone) label.appendChild(document.createTextNode(" (times in " + zone + ")"));
      label.appendChild(document.createTextNode(range
        ? ". Double-click the overview to show everything again."
        : ". Drag across the overview to zoom every timeline chart; double-click it to clear."));
    }
    return Promise.all(jobs);
  }
  dslogs.setRange = setRange;

  function embedAll() {
    var specsEl = document.getElementById("dslogs-specs");
    var specs = specsEl ? JSON.parse(specsEl.textContent) : {};
    if (typeof window.vegaEmbed !== "function") return Promise.resolve();
    var jobs = Object.keys(specs).map(function (id) {
      var el = chartEl(id);
      if (!el) return null;
      return window.vegaEmbed(el, specs[id], { actions: false, renderer: "svg" }).then(function (res) {
        views[id] = res.view;
        el.classList.add("rendered");
      }).catch(function (err) {
        el.classList.add("failed");
        el.textContent = "This chart could not be drawn: " + err;
        console.error("dslogs chart " + id + ": " + err);
      });
    });
    return Promise.all(jobs).then(function () {
      if (views.overview) {
        views.overview.addSignalListener("brush", function (name, value) { setRange(brushExtent(value)); });
      }
    });
  }

  // Sortable tables: numbers by data-v, text otherwise; empty cells sort last either way.
  function sortTable(table, col, kind, dir) {
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    function key(row) {
      var cell = row.cells[col];
      var raw = cell.hasAttribute("data-v") ? cell.getAttribute("data-v") : cell.textContent.trim();
      if (raw === "") return null;
      if (kind === "num") { var n = parseFloat(raw); return isNaN(n) ? null : n; }
      return raw.toLowerCase();
    }
    var keyed = rows.map(function (r, i) { return { r: r, k: key(r), i: i }; });
    keyed.sort(function (a, b) {
      if (a.k === null && b.k === null) return a.i - b.i;
      if (a.k === null) return 1;
      if (b.k === null) return -1;
      var c = a.k < b.k ? -1 : a.k > b.k ? 1 : 0;
      return c === 0 ? a.i - b.i : c * dir;
    });
    keyed.forEach(function (x) { body.appendChild(x.r); });
  }

  function initTables() {
    Array.prototype.forEach.call(document.querySelectorAll("table.sortable"), function (table) {
      var heads = table.tHead ? table.tHead.rows[0].cells : [];
      Array.prototype.forEach.call(heads, function (th, col) {
        var kind = th.getAttribute("data-sort");
        if (!kind) return;
        th.tabIndex = 0;
        th.setAttribute("role", "button");
        function go() {
          var dir = th.getAttribute("aria-sort") === "ascending" ? -1 : 1;
          Array.prototype.forEach.call(heads, function (h) { h.removeAttribute("aria-sort"); });
          th.setAttribute("aria-sort", dir === 1 ? "ascending" : "descending");
          sortTable(table, col, kind, dir);
        }
        th.addEventListener("click", go);
        th.addEventListener("keydown", function (e) { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); go(); } });
      });
    });
  }

  // A link to a session opens its drill-down.
  function openTarget() {
    var id = decodeURIComponent((location.hash || "").slice(1));
    var el = id && document.getElementById(id);
    if (el && el.tagName === "DETAILS") { el.open = true; el.scrollIntoView(); }
  }

  function init() {
    initTables();
    window.addEventListener("hashchange", openTarget);
    openTarget();
    window.addEventListener("beforeprint", function () {
      Array.prototype.forEach.call(document.querySelectorAll("details"), function (d) { d.open = true; });
    });
    dslogs.ready = embedAll();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
