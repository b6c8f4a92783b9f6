// The page's own script (no inline script: the Content-Security-Policy allows 'self' only).
// - grid: a day's cell opens its round below the grid (htmx), a month's cell opens its month
// - token: remembered for this tab (sessionStorage) once typed, so each confirm needs no retype
// - charts: /api/tasks/<name>/history drawn with uPlot, redrawn every 10 s
(function () {
  "use strict";
  var KEY = "cnkispider-token";

  function onReady(fn) {
    if (document.readyState !== "loading") fn(); else document.addEventListener("DOMContentLoaded", fn);
  }

  function grid() {
    document.addEventListener("click", function (event) {
      var cell = event.target.closest("table.grid td");
      if (!cell) return;
      if (cell.dataset.month) {
        window.location.search = "?month=" + encodeURIComponent(cell.dataset.month);
      } else if (cell.dataset.round && window.htmx) {
        window.htmx.ajax("GET", "/rounds/" + encodeURIComponent(cell.dataset.round), { target: "#round" });
      }
    });
  }

  // A cell's tooltip is made when the pointer first reaches it, from its row, its column and
  // its class: 7,200 to 20,000 title attributes would double the grid's size.
  function tooltips() {
    document.addEventListener("mouseover", function (event) {
      var cell = event.target.closest("table.grid td");
      if (!cell || cell.title || !cell.className) return;
      var table = cell.closest("table");
      var column = table.tHead.rows[0].cells[cell.cellIndex].textContent;
      var label = cell.parentNode.cells[0].textContent;
      // the page's words, from the table (data-*-word, data-states): the page's language
      var states = JSON.parse(table.dataset.states || "{}");
      var state = cell.className.replace("c-", "");
      var rounds = cell.dataset.rounds ? ", " + cell.dataset.rounds + " " + (table.dataset.roundsWord || "rounds") : "";
      cell.title = label + " " + column + ": " + (states[state] || state) + rounds +
        ", " + (cell.textContent || "0") + " " + (table.dataset.documentsWord || "documents");
    });
  }

  function token() {
    var saved = window.sessionStorage.getItem(KEY);
    document.querySelectorAll('input[name="token"]').forEach(function (input) {
      if (saved && !input.value) input.value = saved;
      input.form.addEventListener("submit", function () {
        if (input.value) window.sessionStorage.setItem(KEY, input.value);
      });
    });
  }

  function draw(el, title, series, data) {
    el.textContent = "";
    if (!window.uPlot || data[0].length < 2) {
      // no empty axis: the page's words say there is nothing to draw yet
      var empty = document.createElement("p");
      empty.className = "empty";
      empty.textContent = el.dataset.empty || "no samples yet";
      el.appendChild(empty);
      return;
    }
    // the time axis in the page's language (uPlot's own is English: "Time", "Nov 29")
    var lang = document.documentElement.lang || undefined;
    function when(v, full) {
      if (v == null) return "-";
      return new Date(v * 1000).toLocaleString(lang, full
        ? { month: "numeric", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit" }
        : { month: "numeric", day: "numeric", hour: "2-digit", minute: "2-digit" });
    }
    var time = { label: el.dataset.time || "", value: function (u, v) { return when(v, true); } };
    var opts = { title: title, width: Math.min(el.clientWidth || 900, 1200), height: 220,
                 series: [time].concat(series),
                 axes: [{ values: function (u, splits) { return splits.map(function (v) { return when(v, false); }); } }, {}] };
    new window.uPlot(opts, data, el);
  }

  var COLOURS = ["#1e88e5", "#43a047", "#e53935", "#8e24aa", "#fb8c00", "#00897b", "#6d4c41"];

  function charts() {
    var throughput = document.getElementById("throughput-chart");
    var errors = document.getElementById("errors-chart");
    if (!throughput) return;
    var task = throughput.dataset.task;
    function refresh() {
      fetch("/api/tasks/" + encodeURIComponent(task) + "/history")
        .then(function (r) { return r.json(); })
        .then(function (h) {
          // the title and series names come translated from the page (data-title, data-labels)
          var labels = JSON.parse(throughput.dataset.labels);
          draw(throughput, throughput.dataset.title,
               labels.map(function (l, i) { return { label: l, stroke: COLOURS[i] }; }),
               [h.t, h.pages_per_min, h.documents_per_min, h.challenges_per_min, h.waiting]);
          var reasons = Object.keys(h.errors);
          if (errors && reasons.length) {
            draw(errors, errors.dataset.title,
                 reasons.map(function (r, i) { return { label: r, stroke: COLOURS[i % COLOURS.length] }; }),
                 [h.t].concat(reasons.map(function (r) { return h.errors[r]; })));
          }
        })
        .catch(function () { /* the server away a moment: the next refresh tries again */ });
    }
    refresh();
    window.setInterval(refresh, 10000);
  }

  onReady(function () { grid(); tooltips(); token(); charts(); });
})();
