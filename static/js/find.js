// Find inside a trajectory: the bar (#find-bar) asks the server for every hit in the shown
// branch (the page holds only a few windows of steps), says "hit i of n", and goes to each
// hit: its window is loaded (window.StudioTimeline.showStep), the match is wrapped in <mark>
// in the page's own text nodes (nothing from the server is ever parsed as HTML) and
// scrolled into view. Ctrl+F or "/" opens it; Enter / Shift+Enter or F3 / Shift+F3 go to
// the next / previous hit; Escape closes it.
(function () {
  "use strict";

  var bar, input, count, note, root;
  var hits = [];
  var capped = false;
  var index = -1;
  var query = "";
  var timer = null;
  var pending = null;
  var FIELD_SELECTORS = {
    thinking: ".thinking",
    action: ".step-action",
    observation: ".step-obs .obs-body",
  };

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
  }

  function total() {
    return capped ? hits.length.toLocaleString("en-US") + "+" : hits.length.toLocaleString("en-US");
  }

  function say(text) {
    count.textContent = text;
  }

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
    note.hidden = !text;
  }

  function search() {
    query = input.value.trim();
    if (pending) pending.abort();
    clearMarks();
    hits = [];
    index = -1;
    setNote("");
    if (!query) {
      say("");
      return;
    }
    say("Searching…");
    pending = new AbortController();
    var url = new URL(root.dataset.findUrl, window.location.href);
    url.searchParams.set("branch", root.dataset.branch);
    url.searchParams.set("q", query);
    var asked = query;
    fetch(url.toString(), { signal: pending.signal, headers: { Accept: "application/json" } })
      .then(function (r) {
        if (!r.ok) throw new Error("The find failed (" + r.status + ")");
        return r.json();
      })
      .then(function (data) {
        if (asked !== query) return;
        hits = data.hits || [];
        capped = !!data.capped;
        if (!hits.length) {
          say("No hits");
          return;
        }
        go(0);
      })
      .catch(function (err) {
        if (err.name === "AbortError") return;
        say(err.message);
      });
  }

  // The text nodes of `scope` and where each starts in their joined text.
  function textOf(scope) {
    var walker = document.createTreeWalker(scope, NodeFilter.SHOW_TEXT);
    var nodes = [];
    var text = "";
    var node;
    while ((node = walker.nextNode())) {
      nodes.push({ node: node, start: text.length });
      text += node.nodeValue;
    }
    return { nodes: nodes, text: text };
  }

  // Wrap text [from, to) of `scope` in <mark> elements (one per text node it spans).
  function markRange(scope, from, to) {
    var found = textOf(scope);
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
  // rendering that shows the stored text otherwise, or a preview shorter than the text).
  function locate(scope, occurrence) {
    var text = textOf(scope).text.toLowerCase();
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

  function go(i) {
    if (!hits.length) return;
    index = ((i % hits.length) + hits.length) % hits.length;
    var hit = hits[index];
    var asked = query;
    var where = hit.field + " of step " + hit.step;
    say("hit " + (index + 1).toLocaleString("en-US") + " of " + total());
    bar.dataset.step = hit.step;
    window.StudioTimeline.showStep(hit.step).then(function (step) {
      if (asked !== query || hits[index] !== hit) return;
      clearMarks();
      if (!step) {
        setNote("Step " + hit.step + " could not be loaded.");
        return;
      }
      var scope = step.querySelector(FIELD_SELECTORS[hit.field]);
      if (scope && scope.tagName === "DETAILS") scope.open = true;
      var more = hit.part === "load" && !hit.loaded && scope && scope.querySelector(".preview-more button[hx-get]");
      if (more) {
        hit.loaded = true; // asked once: an error answer leaves the preview, never a loop
        // past a long observation's preview: load it whole (as its button does), then mark
        setNote("In the " + where + ", past its preview: loading the full observation…");
        htmx.ajax("GET", more.getAttribute("hx-get"), { source: more, target: scope, swap: "innerHTML" })
          .then(function () { if (hits[index] === hit && asked === query) go(index); });
        return;
      }
      if (hit.part === "cut") {
        setNote("In the " + where + ", in the part not shown:", hit.full_url);
        step.scrollIntoView({ block: "start" });
        return;
      }
      var at = scope ? locate(scope, hit.occurrence) : -1;
      if (at < 0) {
        setNote("In the " + where + ", not in its rendering on this page:", hit.full_url);
        step.scrollIntoView({ block: "start" });
        return;
      }
      setNote("In the " + where + ".");
      var marks = markRange(scope, at, at + query.length);
      if (marks.length) {
        marks.forEach(function (m) { m.classList.add("current"); });
        marks[0].scrollIntoView({ block: "center" });
      }
    });
  }

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
      go(index + (evt.shiftKey ? -1 : 1));
    } else if (evt.key === "Escape" && (t === input || !typing)) {
      evt.preventDefault();
      close();
    } else if (evt.key === "Enter" && t === input) {
      evt.preventDefault();
      window.clearTimeout(timer);
      if (input.value.trim() !== query) search();
      else go(index + (evt.shiftKey ? -1 : 1));
    }
  });

  document.addEventListener("DOMContentLoaded", function () {
    root = document.getElementById("trajectory");
    bar = document.getElementById("find-bar");
    if (!root || !bar || !root.dataset.findUrl) { bar = null; return; }
    input = document.getElementById("find-input");
    count = document.getElementById("find-count");
    note = document.getElementById("find-note");
    input.addEventListener("input", function () {
      window.clearTimeout(timer);
      timer = window.setTimeout(search, 250);
    });
    document.getElementById("find-next").addEventListener("click", function () { go(index + 1); });
    document.getElementById("find-prev").addEventListener("click", function () { go(index - 1); });
    document.getElementById("find-close").addEventListener("click", close);
    var opener = document.getElementById("find-open");
    if (opener) opener.addEventListener("click", open);
  });
})();
