// A world's page (templates/worlds/world.html): draws its episode charts with Plotly (our
// static copy, loaded on demand), redraws them with Plotly.react when the polled "live"
// part brings new figures, opens an episode on a click and turns a box/lasso selection (or
// the table's checkboxes) into the ids the queue and dataset forms post.
(function () {
  "use strict";
  var root = document.getElementById("world-episodes");
  if (!root) return;
  var CHARTS = ["reward", "success", "steps"];
  var signature = null;
  var chartPicks = new Set(); // ids selected on a chart (the newest selection)
  var tablePicks = new Set(); // ids ticked in the table
  var waiters = null;

  function withPlotly(callback) {
    if (window.Plotly) { callback(); return; }
    if (waiters) { waiters.push(callback); return; }
    waiters = [callback];
    var script = document.createElement("script");
    script.src = root.dataset.plotlySrc;
    script.onload = function () { var w = waiters; waiters = null; w.forEach(function (fn) { fn(); }); };
    script.onerror = function () { waiters = null; };
    document.head.appendChild(script);
  }

  function figures() {
    var holder = document.getElementById("world-figures-data");
    return holder ? JSON.parse(holder.textContent) : null;
  }

  function picked() {
    var all = new Set(chartPicks);
    tablePicks.forEach(function (id) { all.add(id); });
    return all;
  }

  function showSelection() {
    var ids = Array.from(picked());
    var n = document.getElementById("selection-n");
    if (n) n.textContent = String(ids.length);
    document.querySelectorAll("#world-selection .selection-ids").forEach(function (input) {
      input.value = ids.join(",");
    });
    ["selection-queue", "selection-dataset"].forEach(function (id) {
      var button = document.getElementById(id);
      if (button) button.disabled = ids.length === 0;
    });
    root.dataset.selected = String(ids.length);
  }

  // The chart selection stays highlighted through redraws: each episode trace's selected
  // points are those whose id was selected.
  function markSelected(fig) {
    fig.data.forEach(function (trace) {
      if (!trace.meta || trace.meta.kind !== "episodes") return;
      if (chartPicks.size === 0) { trace.selectedpoints = null; return; }
      var at = [];
      (trace.customdata || []).forEach(function (cd, i) { if (chartPicks.has(cd[1])) at.push(i); });
      trace.selectedpoints = at;
    });
    return fig;
  }

  function bind(el) {
    el.on("plotly_click", function (evt) {
      var point = evt && evt.points && evt.points[0];
      if (point && point.customdata && point.customdata[0]) window.location.href = point.customdata[0];
    });
    el.on("plotly_selected", function (evt) {
      chartPicks = new Set();
      if (evt && evt.points) {
        evt.points.forEach(function (p) { if (p.customdata && p.customdata[1] != null) chartPicks.add(p.customdata[1]); });
      }
      showSelection();
    });
    el.on("plotly_deselect", function () { chartPicks = new Set(); showSelection(); });
  }

  function draw() {
    var figs = figures();
    if (!figs) return;
    if (figs.signature === signature) return;
    withPlotly(function () {
      var draws = CHARTS.map(function (name) {
        var el = document.getElementById("chart-" + name);
        var fig = figs[name];
        if (!el || !fig) return Promise.resolve();
        markSelected(fig);
        var first = !el.dataset.drawn;
        var done = window.Plotly.react(el, fig.data, fig.layout, fig.config);
        if (first) { el.dataset.drawn = "1"; bind(el); }
        return done;
      });
      Promise.all(draws).then(function () {
        signature = figs.signature;
        root.dataset.signature = figs.signature;
        // for tests and assistive tools: how many episodes each chart plots now
        CHARTS.forEach(function (name) {
          var el = document.getElementById("chart-" + name);
          var fig = figs[name];
          if (!el || !fig) return;
          var n = 0;
          fig.data.forEach(function (t) { if (t.meta && t.meta.kind === "episodes") n += t.y.length; });
          el.dataset.points = String(n);
        });
      });
    });
  }

  var live = document.getElementById("world-live");
  if (live) {
    document.body.addEventListener("htmx:configRequest", function (evt) {
      if (evt.detail.elt === live && signature) evt.detail.parameters.since = signature;
    });
    document.body.addEventListener("htmx:beforeRequest", function (evt) {
      // no polling while the page is hidden (a background tab)
      if (evt.detail.elt === live && document.hidden) evt.preventDefault();
    });
    document.body.addEventListener("htmx:afterSwap", function (evt) {
      if (evt.detail.target === live) draw();
    });
  }

  document.addEventListener("change", function (evt) {
    var box = evt.target;
    if (!box.classList || !box.classList.contains("episode-pick")) return;
    var id = parseInt(box.value, 10);
    if (box.checked) tablePicks.add(id); else tablePicks.delete(id);
    showSelection();
  });
  document.body.addEventListener("htmx:afterSwap", function (evt) {
    if (evt.detail.target && evt.detail.target.id === "world-table") {
      document.querySelectorAll("#world-table .episode-pick").forEach(function (box) {
        box.checked = tablePicks.has(parseInt(box.value, 10));
      });
    }
  });
  var clear = document.getElementById("selection-clear");
  if (clear) {
    clear.addEventListener("click", function () {
      chartPicks = new Set();
      tablePicks = new Set();
      document.querySelectorAll("#world-table .episode-pick").forEach(function (box) { box.checked = false; });
      showSelection();
      signature = null; // redraw without the highlight
      draw();
    });
  }
  showSelection();
  draw();
})();
