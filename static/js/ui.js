// Library and trajectory pages: folding long observations, jump to step, j/k navigation.
(function () {
  "use strict";

  // "Show all" on clamped observations (works for steps loaded later by htmx too).
  document.addEventListener("click", function (evt) {
    var button = evt.target.closest(".fold-toggle");
    if (!button) return;
    var fold = button.closest("[data-fold]");
    var open = fold.classList.toggle("open");
    button.textContent = open ? button.dataset.less : button.dataset.more;
    if (!open) fold.scrollIntoView({ block: "nearest" });
  });

  // A clamp that hides nothing needs no button: unfold those once they are in the page.
  function settleFolds(scope) {
    var folds = (scope || document).querySelectorAll("[data-fold]:not([data-settled])");
    Array.prototype.forEach.call(folds, function (fold) {
      var body = fold.querySelector(".fold-body");
      if (!body || body.offsetParent === null) return; // hidden (closed <details>): later
      fold.setAttribute("data-settled", "");
      if (body.scrollHeight <= body.clientHeight + 4) {
        fold.classList.add("open", "fits");
      }
    });
  }
  document.addEventListener("htmx:afterSettle", function () { settleFolds(document); });
  document.addEventListener("toggle", function () { settleFolds(document); }, true);
  document.addEventListener("DOMContentLoaded", function () { settleFolds(document); });

  // Library filters: leave empty fields out of the request, so pushed URLs stay short
  // (?q=flight rather than ?q=flight&domain=&source=&tag=).
  document.addEventListener("htmx:configRequest", function (evt) {
    if (!evt.detail.elt.closest || !evt.detail.elt.closest("#lib-filters")) return;
    var params = evt.detail.parameters;
    Object.keys(params).forEach(function (key) {
      if (params[key] === "") delete params[key];
    });
  });

  var root = null;

  function steps() {
    return Array.prototype.slice.call(document.querySelectorAll("#steps .step"));
  }

  function current() {
    return document.querySelector("#steps .step.current");
  }

  function highlight(el, scroll) {
    if (!el) return;
    var prev = current();
    if (prev) prev.classList.remove("current");
    el.classList.add("current");
    if (scroll) el.scrollIntoView({ block: "start" });
  }

  // The step nearest the top of the viewport (where j/k start when nothing is highlighted).
  function visibleStep() {
    var all = steps();
    for (var i = 0; i < all.length; i++) {
      if (all[i].getBoundingClientRect().bottom > 70) return all[i];
    }
    return all[all.length - 1] || null;
  }

  function stepsUrl(start) {
    return root.dataset.stepsUrl + "?branch=" + encodeURIComponent(root.dataset.branch) + "&start=" + start;
  }

  // Show step n: scroll to it if loaded, else replace the timeline by the window holding it.
  function jumpTo(n) {
    var total = parseInt(root.dataset.total, 10) || 0;
    if (isNaN(n) || n < 0 || total === 0) return;
    n = Math.min(n, total - 1);
    var el = document.getElementById("step-" + n);
    var url = new URL(window.location.href);
    url.searchParams.set("step", n);
    url.hash = "step-" + n;
    history.replaceState(null, "", url.toString());
    if (el) {
      highlight(el, true);
      return;
    }
    var size = parseInt(root.dataset.pageSize, 10) || 50;
    var start = n - (n % size);
    htmx.ajax("GET", stepsUrl(start), { target: "#steps", swap: "innerHTML" }).then(function () {
      highlight(document.getElementById("step-" + n), true);
    });
  }

  function move(delta) {
    var all = steps();
    var cur = current() || visibleStep();
    if (!cur) return;
    var i = all.indexOf(cur);
    if (current()) i += delta;
    if (i >= all.length) {
      var more = document.querySelector("#steps .steps-next");
      if (more) more.scrollIntoView({ block: "end" });
      return;
    }
    if (i < 0) {
      var prev = document.querySelector("#steps .steps-prev");
      if (prev) htmx.trigger(prev, "click");
      return;
    }
    highlight(all[i], true);
  }

  document.addEventListener("keydown", function (evt) {
    if (!root || evt.ctrlKey || evt.metaKey || evt.altKey) return;
    var t = evt.target;
    if (t && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName))) {
      if (evt.key === "Escape") t.blur();
      return;
    }
    if (evt.key === "j") { move(1); evt.preventDefault(); }
    else if (evt.key === "k") { move(-1); evt.preventDefault(); }
    else if (evt.key === "g") {
      var input = document.getElementById("jump-input");
      if (input) { input.focus(); input.select(); evt.preventDefault(); }
    }
  });

  document.addEventListener("click", function (evt) {
    var step = evt.target.closest && evt.target.closest("#steps .step");
    if (step && !evt.target.closest("a, button, summary, input")) highlight(step, false);
  });

  document.addEventListener("DOMContentLoaded", function () {
    root = document.getElementById("trajectory");
    if (!root) return;
    var form = document.getElementById("jump-form");
    if (form) {
      form.addEventListener("submit", function (evt) {
        evt.preventDefault();
        var input = document.getElementById("jump-input");
        jumpTo(parseInt(input.value, 10));
        input.blur();
      });
    }
    if (root.dataset.jump !== undefined) {
      highlight(document.getElementById("step-" + root.dataset.jump), true);
    } else {
      // A link to "#step-N" (the step numbers are anchors) whose step is not in the first
      // window: load the window holding it instead of silently staying at the top.
      var m = /^#step-(\d+)$/.exec(window.location.hash);
      if (m) jumpTo(parseInt(m[1], 10));
    }
  });
})();
