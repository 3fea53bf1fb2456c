// A world's page (templates/worlds/world.html): draws its episode charts with Plotly (our
// static copy, loaded on demand), redraws them with Plotly.react when the polled "live"
// part brings new figures (the latest-episodes table comes with them, out of band: its
// ticked episodes stay ticked; the token filter's list follows the project's tokens),
// opens an episode on a click and turns a box/lasso selection (or the table's checkboxes)
// into the ids the queue and dataset forms post.
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
    var word = document.getElementById("selection-word");
    if (word) word.textContent = ids.length === 1 ? "episode" : "episodes";
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

  // The token filter lists the tokens the last poll named; the one chosen stays chosen
  // (a token no longer listed is kept as it is, until the filters are applied again).
  function showTokens() {
    var holder = document.getElementById("world-tokens-data");
    var select = document.getElementById("world-token-filter");
    if (!holder || !select) return;
    var tokens = JSON.parse(holder.textContent);
    var current = select.value;
    var have = Array.prototype.slice.call(select.options, 1).map(function (o) { return [o.value, o.text]; });
    if (JSON.stringify(have) === JSON.stringify(tokens)) return;
    var listed = tokens.some(function (t) { return t[0] === current; });
    while (select.options.length > 1) select.remove(1);
    tokens.forEach(function (t) { select.add(new Option(t[1], t[0])); });
    if (current && !listed) {
      var kept = have.filter(function (t) { return t[0] === current; })[0];
      select.add(new Option(kept ? kept[1] : current, current));
    }
    select.value = current;
  }

  // The table is drawn again with each poll that changed something: ticked episodes stay
  // ticked.
  function keepTicks() {
    document.querySelectorAll("#world-table .episode-pick").forEach(function (box) {
      box.checked = tablePicks.has(parseInt(box.value, 10));
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
      if (evt.detail.target !== live) return;
      keepTicks();
      showTokens();
      draw();
    });
  }

  document.addEventListener("change", function (evt) {
    var box = evt.target;
    if (!box.classList || !box.classList.contains("episode-pick")) return;
    var id = parseInt(box.value, 10);
    if (box.checked) tablePicks.add(id); else tablePicks.delete(id);
    showSelection();
  });
  document.body.addEventListener("htmx:oobAfterSwap", function (evt) {
    if (evt.detail.target && evt.detail.target.id === "world-table") keepTicks();
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
