// Library and trajectory pages: folding long observations, jump to step, j/k navigation,
// and a timeline that keeps a bounded number of step windows in the page.
(function () {
  "use strict";

  // Open or close a clamped text (`[data-fold]`), its button saying what a click does next.
  function setFold(fold, open, button) {
    fold.classList.toggle("open", open);
    button = button || fold.querySelector(".fold-toggle");
    if (button) button.textContent = open ? button.dataset.less : button.dataset.more;
  }
  // For the find bar (a hit under the fade) and the job pages (folds open before a swap).
  window.StudioFolds = { set: setFold };

  // "Show all" on clamped observations (works for steps loaded later by htmx too).
  document.addEventListener("click", function (evt) {
    var button = evt.target.closest(".fold-toggle");
    if (!button) return;
    var fold = button.closest("[data-fold]");
    var open = !fold.classList.contains("open");
    setFold(fold, open, button);
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
    // remembered apart from the element: its window may be emptied and loaded again
    root.dataset.current = el.dataset.index;
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

  function pageSize() {
    return parseInt(root.dataset.pageSize, 10) || 25;
  }

  // ---- a bounded timeline ----------------------------------------------------------------
  // Steps come in windows (.step-window, data-start..data-end). Past data-windows-kept loaded
  // windows, or data-elements-kept elements in them, the windows more than a screen away
  // from the viewport are emptied (farthest first) into placeholders of the same height
  // (nothing on screen moves) and loaded again (dir=none: the window alone) when they come
  // within a screen; a jump to a step in one loads it. A window holding the focus or a text
  // selection is never emptied.

  var placeholders = null; // IntersectionObserver of the emptied windows
  var timelineLoad = null; // the timeline replaced by a jump's window: its request in flight
  var pruneQueued = false;

  function windowAt(start) {
    return document.querySelector('#steps .step-window[data-start="' + start + '"]');
  }

  function distance(el) {
    var r = el.getBoundingClientRect();
    if (r.bottom < 0) return -r.bottom;
    if (r.top > window.innerHeight) return r.top - window.innerHeight;
    return 0;
  }

  function inUse(win) {
    var active = document.activeElement;
    if (active && active !== document.body && win.contains(active)) return true;
    var sel = window.getSelection && window.getSelection();
    if (sel && sel.rangeCount && !sel.isCollapsed && sel.getRangeAt(0).intersectsNode(win)) return true;
    return false;
  }

  function empty(win) {
    win.style.height = win.getBoundingClientRect().height + "px";
    win.classList.add("placeholder");
    win.setAttribute("aria-label", "Steps " + win.dataset.start + "–" + win.dataset.end + " (loaded again when scrolled to)");
    win.textContent = "";
    placeholders.observe(win);
  }

  function elementsIn(win) {
    // counted once: a window's steps only change when it is loaded again (a new element)
    if (!win.dataset.elements) win.dataset.elements = win.getElementsByTagName("*").length;
    return parseInt(win.dataset.elements, 10);
  }

  function prune() {
    pruneQueued = false;
    if (!root) return;
    var loaded = Array.prototype.slice.call(document.querySelectorAll("#steps .step-window:not(.placeholder)"));
    var maxWindows = parseInt(root.dataset.windowsKept, 10) || 6;
    var maxElements = parseInt(root.dataset.elementsKept, 10) || 12000;
    var elements = loaded.reduce(function (sum, w) { return sum + elementsIn(w); }, 0);
    var count = loaded.length;
    if (count <= maxWindows && elements <= maxElements) return;
    var far = loaded.filter(function (w) { return distance(w) > window.innerHeight && !inUse(w); });
    far.sort(function (a, b) { return distance(b) - distance(a); });
    for (var i = 0; i < far.length && (count > maxWindows || elements > maxElements); i++) {
      elements -= elementsIn(far[i]);
      count -= 1;
      empty(far[i]);
    }
  }

  function queuePrune() {
    if (pruneQueued || !root) return;
    pruneQueued = true;
    window.requestAnimationFrame(prune);
  }

  // Load an emptied window again, in its place; resolves once it is in the page. The
  // window is the request's source: htmx runs one request per source at a time and queues
  // the others (their promises never resolve), so windows must not share one.
  function refill(win) {
    placeholders.unobserve(win);
    if (!win._refill) {
      var url = stepsUrl(win.dataset.start) + "&dir=none";
      win._refill = htmx.ajax("GET", url, { source: win, target: win, swap: "outerHTML" });
      var retry = function () {
        // still a placeholder (an error answer, or none): try again once it is near later
        if (!win.isConnected) return;
        win._refill = null;
        window.setTimeout(function () { if (win.isConnected) placeholders.observe(win); }, 2000);
      };
      win._refill.then(retry, retry);
    }
    return win._refill;
  }

  // Show step n: scroll to it if loaded, load its emptied window, else replace the timeline
  // by the window holding it. Resolves once the step is in the page (`scroll` false: the
  // caller scrolls, e.g. the find bar to its hit).
  function jumpTo(n, scroll) {
    if (scroll === undefined) scroll = true;
    var total = parseInt(root.dataset.total, 10) || 0;
    if (isNaN(n) || n < 0 || total === 0) return Promise.resolve(null);
    n = Math.min(n, total - 1);
    var el = document.getElementById("step-" + n);
    var url = new URL(window.location.href);
    url.searchParams.set("step", n);
    url.hash = "step-" + n;
    history.replaceState(null, "", url.toString());
    if (el) {
      highlight(el, scroll);
      return Promise.resolve(el);
    }
    if (timelineLoad) {
      // htmx queues a second request of the same source and never resolves its promise:
      // wait for the one in flight (a "#step-N" link and the find bar both jump at load)
      var again = function () { return jumpTo(n, scroll); };
      return timelineLoad.then(again, again);
    }
    var start = n - (n % pageSize());
    var win = windowAt(start);
    var loading;
    if (win && win.classList.contains("placeholder")) {
      loading = refill(win);
    } else {
      loading = timelineLoad = htmx.ajax("GET", stepsUrl(start), { source: "#steps", target: "#steps", swap: "innerHTML" });
      var done = function () { timelineLoad = null; };
      timelineLoad.then(done, done);
    }
    return loading.then(function () {
      var shown = document.getElementById("step-" + n);
      highlight(shown, scroll);
      return shown;
    });
  }

  // For the find bar (static/js/find.js): bring step n into the page.
  window.StudioTimeline = {
    showStep: function (n) { return root ? jumpTo(n, false) : Promise.resolve(null); },
  };

  function move(delta) {
    var cur = current();
    if (!cur) {
      highlight(visibleStep(), true);
      return;
    }
    var n = parseInt(cur.dataset.index, 10) + delta;
    var el = document.getElementById("step-" + n);
    if (el) {
      highlight(el, true);
      return;
    }
    var win = windowAt(n - (n % pageSize()));
    if (n >= 0 && win && win.classList.contains("placeholder")) {
      jumpTo(n);
      return;
    }
    if (delta > 0) {
      var more = document.querySelector("#steps .steps-next");
      if (more) more.scrollIntoView({ block: "end" });
      return;
    }
    var prev = document.querySelector("#steps .steps-prev");
    if (prev) htmx.trigger(prev, "click");
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
    placeholders = new IntersectionObserver(function (entries) {
      entries.forEach(function (entry) {
        if (entry.isIntersecting) refill(entry.target);
      });
    }, { rootMargin: "100% 0px" });
    window.addEventListener("scroll", queuePrune, { passive: true });
    document.addEventListener("htmx:afterSettle", function () {
      // a window came in: the current step keeps its highlight, far windows are emptied
      var cur = root.dataset.current && document.getElementById("step-" + root.dataset.current);
      if (cur && !cur.classList.contains("current")) cur.classList.add("current");
      queuePrune();
    });
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
