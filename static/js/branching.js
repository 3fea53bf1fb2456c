// Branching area: snippet buttons in the editor, and drawing the branch tree with Plotly
// (served from our static files, loaded on demand so the tree also works as an htmx fragment).
(function () {
  "use strict";
  if (window.StudioBranching) {
    // Loaded again by a swapped-in fragment: just draw what is new.
    window.StudioBranching.drawTrees();
    return;
  }

  var plotlyWaiters = null;

  function withPlotly(src, callback) {
    if (window.Plotly) { callback(); return; }
    if (plotlyWaiters) { plotlyWaiters.push(callback); return; }
    plotlyWaiters = [callback];
    var script = document.createElement("script");
    script.src = src;
    script.onload = function () {
      var waiting = plotlyWaiters; plotlyWaiters = null;
      waiting.forEach(function (fn) { fn(); });
    };
    script.onerror = function () { plotlyWaiters = null; };
    document.head.appendChild(script);
  }

  function drawOne(el) {
    var data = document.getElementById(el.dataset.figureId);
    if (!data) return;
    el.dataset.drawn = "1";
    var fig = JSON.parse(data.textContent);
    withPlotly(el.dataset.plotlySrc, function () {
      window.Plotly.newPlot(el, fig.data, fig.layout, fig.config).then(function () {
        el.dataset.ready = "1";
      });
      el.on("plotly_click", function (evt) {
        var point = evt.points && evt.points[0];
        if (point && point.customdata) window.location.href = point.customdata;
      });
    });
  }

  function drawTrees(root) {
    (root || document).querySelectorAll(".branch-tree-plot:not([data-drawn]), .plotly-figure:not([data-drawn])").forEach(drawOne);
  }

  function bindSnippets(root) {
    (root || document).querySelectorAll("button.snippet:not([data-bound])").forEach(function (btn) {
      btn.dataset.bound = "1";
      btn.addEventListener("click", function () {
        var form = btn.closest("form");
        var area = form && form.querySelector("textarea[name=action]");
        if (!area) return;
        area.value = btn.dataset.snippet;
        area.focus();
      });
    });
  }

  // The playground's "Hand over" link names the world model picked now, not the one the
  // page was drawn with (?world= of the editor it opens).
  function bindHandover(root) {
    (root || document).querySelectorAll("a#play-handover:not([data-bound])").forEach(function (link) {
      link.dataset.bound = "1";
      var form = document.getElementById("play-form") || link.closest("form");
      var sel = form && form.querySelector("select[name=world_endpoint]");
      if (!sel) return;
      var follow = function () {
        var url = new URL(link.href, window.location.href);
        if (sel.value) url.searchParams.set("world", sel.value);
        else url.searchParams.delete("world");
        link.href = url.pathname + url.search;
      };
      sel.addEventListener("change", follow);
      follow();
    });
  }

  // Picking another world model fills in its default sampling (data-* on the option).
  function bindEndpointDefaults(root) {
    (root || document).querySelectorAll("select[name=world_endpoint]:not([data-bound])").forEach(function (sel) {
      sel.dataset.bound = "1";
      sel.addEventListener("change", function () {
        var opt = sel.options[sel.selectedIndex];
        var form = sel.closest("form");
        if (!opt || !form) return;
        ["temperature", "top_p", "max_tokens"].forEach(function (name) {
          var value = opt.dataset[name.replace(/_(.)/g, function (m, c) { return c.toUpperCase(); })];
          var input = form.querySelector("[name=" + name + "]");
          if (input && value !== undefined) input.value = value;
        });
      });
    });
  }

  // Adding a domain's presets from the playground or the editor reloads the page: keep the
  // action typed so far for the page it comes back to (this tab only).
  var KEPT = "studio:kept-action:";
  function keepTypedAction(root) {
    var presets = document.getElementById("presets-form");
    if (presets && !presets.dataset.bound) {
      presets.dataset.bound = "1";
      presets.addEventListener("submit", function () {
        var area = document.querySelector("form textarea[name=action]");
        var next = presets.querySelector("input[name=next]");
        if (area && area.value && next) {
          try { window.sessionStorage.setItem(KEPT + next.value, area.value); } catch (e) { /* storage off */ }
        }
      });
    }
    var key = KEPT + window.location.pathname + window.location.search;
    var kept = null;
    try { kept = window.sessionStorage.getItem(key); } catch (e) { return; }
    if (kept === null) return;
    var target = (root || document).querySelector("form textarea[name=action]");
    if (!target) return;
    window.sessionStorage.removeItem(key);
    target.value = kept;  // typed on this very page a moment ago
  }

  function init(root) {
    drawTrees(root); bindSnippets(root); bindEndpointDefaults(root); bindHandover(root); keepTypedAction(root);
  }

  // The job page refreshes its progress every 500 ms by swapping HTML: keep what the reader
  // opened (thinking folds, "Show all" clamps) open across refreshes. Elements are keyed by
  // their branch card and their position in it, which stay stable while a job runs.
  function foldKeys(root) {
    var keys = {};
    root.querySelectorAll(".job-branch").forEach(function (card) {
      card.querySelectorAll("details").forEach(function (d, i) {
        if (d.open) keys[card.id + "/d" + i] = true;
      });
      card.querySelectorAll("[data-fold]").forEach(function (f, i) {
        if (f.classList.contains("open") && !f.classList.contains("fits")) {
          keys[card.id + "/f" + i] = true;
        }
      });
    });
    return keys;
  }

  function restoreFolds(root, keys) {
    root.querySelectorAll(".job-branch").forEach(function (card) {
      card.querySelectorAll("details").forEach(function (d, i) {
        if (keys[card.id + "/d" + i]) d.open = true;
      });
      card.querySelectorAll("[data-fold]").forEach(function (f, i) {
        if (keys[card.id + "/f" + i]) window.StudioFolds.set(f, true);
      });
    });
  }

  var openBeforeSwap = null;
  document.addEventListener("htmx:beforeSwap", function (evt) {
    if (evt.detail.target && evt.detail.target.id === "job-progress") {
      openBeforeSwap = foldKeys(evt.detail.target);
    }
  });
  document.addEventListener("htmx:afterSwap", function (evt) {
    if (openBeforeSwap && evt.detail.target && evt.detail.target.id === "job-progress") {
      restoreFolds(evt.detail.target, openBeforeSwap);
      openBeforeSwap = null;
    }
  });

  window.StudioBranching = { drawTrees: drawTrees, init: init };
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", function () { init(); });
  } else {
    init();
  }
  document.addEventListener("htmx:afterSettle", function (evt) { init(evt.target); });
})();
