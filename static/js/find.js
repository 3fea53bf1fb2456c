// Find in every step: the bar (#find-bar) asks the server for every hit in what the page
// shows (a page holds only a few windows of steps), says "hit i of n", and goes to each hit:
// the part of the page that holds it is loaded, the match is wrapped in <mark> in the page's
// own text nodes (nothing from the server is ever parsed as HTML) and scrolled into view.
// Ctrl+F or "/" opens it; Enter / Shift+Enter or F3 / Shift+F3 go to the next / previous
// hit; Escape closes it.
//
// Two pages have it, each with its own way to bring a hit in (`pages` below): the trajectory
// page (#trajectory: one branch; a step's window comes from window.StudioTimeline.showStep)
// and the compare view (#compare-find: every compared branch; a step's row comes in place of
// the folded run, loader or gap that holds it, from the rows view with `jump=`).
(function () {
  "use strict";

  var bar, input, count, note, root, page;
  // The window of hits the server last sent (at most its `limit`), and where it lies among
  // them all: `before` hits come before it, `total` were counted (`more`: there are more).
  // `index` is the current hit's place in the window; past either end, the next window comes.
  var hits = [];
  var before = 0;
  var total = 0;
  var more = false;
  var index = -1;
  var query = "";
  var answer = {};
  var timer = null;
  var pending = null;
  // Opened from a link (a search hit: `?find=<text>&at=<step>`): the first window starts at
  // the first hit at that step or after it, the hits before it counted.
  var startAt = null;

  function isOpen() {
    return bar && !bar.hidden;
  }

  function open() {
    bar.hidden = false;
    input.focus();
    input.select();
  }

  function close() {
    bar.hidden = true;
    clearMarks();
    if (pending) pending.abort();
    window.clearTimeout(timer);
    input.blur();
  }

  function clearMarks() {
    var marks = document.querySelectorAll("mark.find-hit");
    Array.prototype.forEach.call(marks, function (mark) {
      var parent = mark.parentNode;
      parent.replaceChild(document.createTextNode(mark.textContent), mark);
      parent.normalize();
    });
    Array.prototype.forEach.call(document.querySelectorAll(".find-cell"), function (el) {
      el.classList.remove("find-cell");
    });
  }

  function number(n) {
    return Number(n).toLocaleString("en-US");
  }

  function say(text) {
    count.textContent = text;
  }

  // The note under the bar: `text`, a "Show all" link, and what the page adds (compare: the
  // earlier steps it does not show).
  function setNote(text, link) {
    note.textContent = text || "";
    if (link) {
      note.appendChild(document.createTextNode(" "));
      var a = document.createElement("a");
      a.href = link;
      a.target = "_blank";
      a.rel = "noopener";
      a.className = "show-all";
      a.textContent = "Show all";
      note.appendChild(a);
    }
    var aside = page.aside ? page.aside() : "";
    if (aside) note.appendChild(document.createTextNode((text ? " " : "") + aside));
    note.hidden = !note.textContent;
  }

  // Ask for a window of hits (`place`: {step, nth, back}); resolves true once it is the one
  // shown, false when a newer question or an error took its place.
  function fetchWindow(place) {
    if (pending) pending.abort();
    pending = new AbortController();
    var url = new URL(root.dataset.findUrl, window.location.href);
    page.params(url);
    url.searchParams.set("q", query);
    Object.keys(place).forEach(function (key) {
      if (place[key] !== undefined && place[key] !== null) url.searchParams.set(key, place[key]);
    });
    var asked = query;
    return fetch(url.toString(), { signal: pending.signal, headers: { Accept: "application/json" } })
      .then(function (r) {
        if (!r.ok) throw new Error("The find failed (" + r.status + ")");
        return r.json();
      })
      .then(function (data) {
        if (asked !== query) return false;
        answer = data;
        hits = data.hits || [];
        before = data.before || 0;
        total = data.total || 0;
        more = !!data.more;
        index = -1;
        return true;
      })
      .catch(function (err) {
        if (err.name !== "AbortError") say(err.message);
        return false;
      });
  }

  function search() {
    query = input.value.trim();
    clearMarks();
    hits = [];
    answer = {};
    before = total = 0;
    more = false;
    index = -1;
    setNote("");
    if (!query) {
      if (pending) pending.abort();
      say("");
      return;
    }
    say("Searching…");
    var place = startAt !== null ? { step: startAt, nth: 0 } : {};
    startAt = null;
    fetchWindow(place).then(function (ok) {
      if (!ok) return;
      if (!total) {
        say("No hits");
        setNote("");
        return;
      }
      go(before); // the window's first hit (none at or after the step asked: the first)
    });
  }

  // Go to hit n (0: the first of them all), bringing its window if it is not this one;
  // past the last the find goes round to the first, and back.
  function go(n) {
    if (!total) return;
    var round = n < 0; // back past the first: the last hit, in the last window
    if (round) n = more ? -1 : total - 1;
    else if (n >= total && !more) n = 0;
    if (n >= before && n < before + hits.length) {
      show(n - before);
      return;
    }
    var place;
    var last = false;
    if (round) {
      place = { back: 1 }; // the last hits (how many there are is then known)
      last = true;
    } else if (n === 0) {
      place = { step: 0, nth: 0 };
    } else if (n >= before + hits.length && hits.length) {
      var end = hits[hits.length - 1];
      place = { step: end.step, nth: end.nth + 1 };
    } else if (hits.length) {
      var first = hits[0];
      place = { step: first.step, nth: first.nth, back: 1 };
      last = true;
    } else {
      place = { step: 0, nth: 0 };
    }
    say("Searching…");
    fetchWindow(place).then(function (ok) {
      if (!ok) return;
      if (!hits.length) {
        say(total ? "No hits here" : "No hits");
        return;
      }
      show(last ? hits.length - 1 : 0);
    });
  }

  function next(step) {
    go(before + index + step);
  }

  // The text nodes of `scope` (those `accept` takes, if given) and where each starts in
  // their joined text.
  function textOf(scope, accept) {
    var walker = document.createTreeWalker(scope, NodeFilter.SHOW_TEXT);
    var nodes = [];
    var text = "";
    var node;
    while ((node = walker.nextNode())) {
      if (accept && !accept(node, scope)) continue;
      nodes.push({ node: node, start: text.length });
      text += node.nodeValue;
    }
    return { nodes: nodes, text: text };
  }

  // Wrap text [from, to) of `scope` in <mark> elements (one per text node it spans).
  function markRange(scope, from, to, accept) {
    var found = textOf(scope, accept);
    var marks = [];
    found.nodes.forEach(function (entry) {
      var len = entry.node.nodeValue.length;
      var a = Math.max(from, entry.start);
      var b = Math.min(to, entry.start + len);
      if (a >= b) return;
      var range = document.createRange();
      range.setStart(entry.node, a - entry.start);
      range.setEnd(entry.node, b - entry.start);
      var mark = document.createElement("mark");
      mark.className = "find-hit";
      range.surroundContents(mark);
      marks.push(mark);
    });
    return marks;
  }

  // Where the hit's occurrence lies in the field's rendered text (-1: not in it, e.g. a
  // rendering that shows the stored text otherwise, or an excerpt shorter than the text).
  function locate(scope, occurrence, accept) {
    var text = textOf(scope, accept).text.toLowerCase();
    var needle = query.toLowerCase();
    var at = -1;
    var from = 0;
    for (var i = 0; i <= occurrence; i++) {
      at = text.indexOf(needle, from);
      if (at < 0) break;
      from = at + needle.length;
    }
    return at;
  }

  // Show hit i of the window: load the part of the page that holds it, mark it, scroll to it.
  function show(i) {
    index = i;
    var hit = hits[index];
    var asked = query;
    var where = page.where(hit);
    say("hit " + number(before + index + 1) + " of " + number(total) + (more ? "+" : ""));
    bar.dataset.step = hit.step;
    page.reveal(hit).then(function (place) {
      if (asked !== query || hits[index] !== hit) return;
      clearMarks();
      if (!place) {
        setNote("Step " + hit.step + " could not be loaded.");
        return;
      }
      if (place.cell) place.cell.classList.add("find-cell");
      var scope = place.scope;
      var at = scope && !place.loadFirst ? locate(scope, hit.occurrence, place.accept) : -1;
      if (at < 0 && hit.part !== "cut" && place.more && !hit.loaded) {
        hit.loaded = true; // asked once: an error answer leaves the excerpt, never a loop
        setNote("In the " + where + ", " + place.moreWords);
        place.more().then(function () { if (hits[index] === hit && asked === query) show(index); });
        return;
      }
      if (hit.part === "cut") {
        setNote("In the " + where + ", in the part not shown:", hit.full_url);
        place.anchor.scrollIntoView({ block: page.anchorBlock });
        return;
      }
      if (place.loadFirst) at = scope ? locate(scope, hit.occurrence, place.accept) : -1;
      if (at < 0) {
        setNote("In the " + where + ", not in its rendering on this page:", hit.full_url);
        place.anchor.scrollIntoView({ block: page.anchorBlock });
        return;
      }
      setNote("In the " + where + ".");
      var marks = markRange(scope, at, at + query.length, place.accept);
      if (marks.length) {
        marks.forEach(function (m) { m.classList.add("current"); });
        unfold(marks[marks.length - 1]);
        marks[0].scrollIntoView({ block: "center" });
      }
    });
  }

  // A mark in the clamped part of a folded text (under the fade of its last quarter, or
  // below the clamp) is unfolded, as the fold's own button does: a hit is never hidden.
  function unfold(mark) {
    var fold = mark.closest("[data-fold]:not(.open)");
    var body = fold && fold.querySelector(".fold-body");
    if (!body || !body.contains(mark)) return;
    var clamp = body.getBoundingClientRect();
    if (mark.getBoundingClientRect().bottom <= clamp.top + body.clientHeight * 0.75) return;
    window.StudioFolds.set(fold, true);
  }

  // ---- the trajectory page: one branch, its steps in windows -------------------------------

  var STEP_FIELDS = {
    thinking: ".thinking",
    action: ".step-action",
    observation: ".step-obs .obs-body",
  };

  var trajectoryPage = {
    anchorBlock: "start",
    params: function (url) {
      url.searchParams.set("branch", root.dataset.branch);
    },
    where: function (hit) {
      return hit.field + " of step " + hit.step;
    },
    // The hit's step in the page: its field (`scope`), and for a hit past a long
    // observation's preview, how to load the observation whole (before looking).
    reveal: function (hit) {
      return window.StudioTimeline.showStep(hit.step).then(function (step) {
        if (!step) return null;
        var scope = step.querySelector(STEP_FIELDS[hit.field]);
        if (scope && scope.tagName === "DETAILS") scope.open = true;
        var button = hit.part === "load" && scope && scope.querySelector(".preview-more button[hx-get]");
        return {
          scope: scope,
          anchor: step,
          loadFirst: !!button,
          moreWords: "past its preview: loading the full observation…",
          more: button ? function () {
            return htmx.ajax("GET", button.getAttribute("hx-get"), { source: button, target: scope, swap: "innerHTML" });
          } : null,
        };
      });
    },
  };

  // ---- the compare view: every compared branch, rows in windows, folded runs --------------

  function columns() {
    var heads = document.querySelectorAll(".compare-table thead th.compare-head[data-branch-id]");
    return Array.prototype.map.call(heads, function (th) { return th.dataset.branchId; });
  }

  function branchName(id) {
    var found = (answer.branches || []).filter(function (b) { return b.id === id; })[0];
    var column = columns().indexOf(String(id)) + 1;
    return (found ? "branch " + found.name : "branch " + id) + (column ? " (column " + column + ")" : "");
  }

  // The rows view's URL (the compared branches and diff of the page) with these parameters.
  function rowsUrl(params) {
    var url = new URL(root.dataset.rowsUrl, window.location.href);
    Object.keys(params).forEach(function (key) {
      if (params[key] !== undefined) url.searchParams.set(key, params[key]);
    });
    return url.toString();
  }

  function busy(el) {
    return el.classList.contains("htmx-request") || !!el.querySelector(".htmx-request");
  }

  // Resolves once htmx is done with `el` (a loader or a run being opened as it scrolled in).
  function idle(el) {
    return new Promise(function (resolve) {
      (function check() {
        if (!el.isConnected || !busy(el)) resolve();
        else window.setTimeout(check, 50);
      })();
    });
  }

  // The row of the page that stands for step n while its own row is not there: a folded run
  // (data-start..data-end), an opened run's loader (data-start..data-to), a gap the find
  // left (data-start..data-end) or the loader of the steps not compared yet (data-start..).
  function holderOf(n) {
    var rows = document.querySelectorAll(
      "#compare-rows > tr.compare-run, #compare-rows > tr.compare-more, #compare-rows > tr.compare-gap"
    );
    for (var i = 0; i < rows.length; i++) {
      var d = rows[i].dataset;
      if (d.start === undefined) continue;
      var end = d.end !== undefined ? d.end : d.to;
      if (parseInt(d.start, 10) <= n && (end === undefined || n <= parseInt(end, 10))) return rows[i];
    }
    return null;
  }

  function jumpParams(holder, n) {
    var d = holder.dataset;
    var params = { start: d.start, jump: n };
    if (holder.classList.contains("compare-run")) params.to = d.end; // identical steps
    else if (d.to !== undefined) params.to = d.to; // the rest of an opened run: identical too
    else {
      params.run = d.run;
      params.until = d.end; // a gap (a loader goes on to the last step)
    }
    return params;
  }

  // Bring the row of step n in; resolves it (null: it could not be).
  function showRow(n, tries) {
    var row = document.getElementById("compare-step-" + n);
    if (row || tries > 20) return Promise.resolve(row);
    var holder = holderOf(n);
    if (!holder) return Promise.resolve(null);
    if (busy(holder)) return idle(holder).then(function () { return showRow(n, tries + 1); });
    return htmx.ajax("GET", rowsUrl(jumpParams(holder, n)), { source: holder, target: holder, swap: "outerHTML" })
      .then(function () {
        // still there: the answer was an error, which htmx does not swap in
        return holder.isConnected ? document.getElementById("compare-step-" + n) : showRow(n, tries + 1);
      }, function () { return null; });
  }

  // The text a compare cell shows of its step: in its <pre> (a text or a diff), without what
  // the diff removed (the reference's text) or the notes of an excerpt's cuts.
  function shownInCell(node, scope) {
    var el = node.parentElement;
    var pre = el && el.closest("pre");
    return !!pre && scope.contains(pre) && !el.closest("del, .elided, .rendered");
  }

  var comparePage = {
    anchorBlock: "center",
    params: function (url) {
      columns().forEach(function (id) { url.searchParams.append("b", id); });
      url.searchParams.set("start", root.dataset.start);
    },
    where: function (hit) {
      return hit.field + " of step " + hit.step + " of " + branchName(hit.branch);
    },
    aside: function () {
      if (!answer.earlier) return "";
      var n = answer.earlier;
      return (hits.length ? "Also in " : "In ") + number(n) + " earlier step" + (n === 1 ? "" : "s") +
        " this page does not show (before step " + answer.start + ").";
    },
    // The hit's cell: its field, and for a cell showing an excerpt, how to load it whole
    // ("Show all") when the match is not in the excerpt.
    reveal: function (hit) {
      return showRow(hit.step, 0).then(function (row) {
        if (!row) return null;
        var cell = row.querySelector('td.compare-cell[data-branch-id="' + Number(hit.branch) + '"]');
        if (!cell) return null;
        var scope = cell.querySelector(hit.field === "action" ? ".cell-action" : ".cell-observation");
        var button = cell.querySelector("button.show-all[hx-get]");
        return {
          scope: scope,
          cell: cell,
          anchor: cell,
          accept: shownInCell,
          // an excerpt with cuts: its matches are not the field's in order, load it whole
          loadFirst: !!(button && scope && scope.querySelector(".elided")),
          moreWords: "past what the cell shows: loading the cell whole…",
          more: button ? function () {
            return htmx.ajax("GET", button.getAttribute("hx-get"), { source: button, target: cell, swap: "outerHTML" });
          } : null,
        };
      });
    },
  };

  document.addEventListener("keydown", function (evt) {
    if (!bar) return;
    var t = evt.target;
    var typing = t && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName));
    if ((evt.ctrlKey || evt.metaKey) && !evt.altKey && (evt.key === "f" || evt.key === "F")) {
      evt.preventDefault();
      open();
      return;
    }
    if (evt.key === "/" && !typing && !evt.ctrlKey && !evt.metaKey && !evt.altKey) {
      evt.preventDefault();
      open();
      return;
    }
    if (!isOpen()) return;
    if (evt.key === "F3") {
      evt.preventDefault();
      next(evt.shiftKey ? -1 : 1);
    } else if (evt.key === "Escape" && (t === input || !typing)) {
      evt.preventDefault();
      close();
    } else if (evt.key === "Enter" && t === input) {
      evt.preventDefault();
      window.clearTimeout(timer);
      if (input.value.trim() !== query) search();
      else next(evt.shiftKey ? -1 : 1);
    }
  });

  document.addEventListener("DOMContentLoaded", function () {
    root = document.querySelector("#trajectory[data-find-url], #compare-find[data-find-url]");
    bar = document.getElementById("find-bar");
    if (!root || !bar) { bar = null; return; }
    page = root.dataset.findKind === "compare" ? comparePage : trajectoryPage;
    input = document.getElementById("find-input");
    count = document.getElementById("find-count");
    note = document.getElementById("find-note");
    input.addEventListener("input", function () {
      window.clearTimeout(timer);
      timer = window.setTimeout(search, 250);
    });
    document.getElementById("find-next").addEventListener("click", function () { next(1); });
    document.getElementById("find-prev").addEventListener("click", function () { next(-1); });
    document.getElementById("find-close").addEventListener("click", close);
    var opener = document.getElementById("find-open");
    if (opener) opener.addEventListener("click", open);
    var asked = new URLSearchParams(window.location.search);
    if (asked.get("find")) {
      var at = parseInt(asked.get("at") || "", 10);
      startAt = isNaN(at) ? null : at;
      input.value = asked.get("find");
      bar.hidden = false;
      search();
    }
  });
})();
