// Annotating a step from the keyboard: 1-5 rate the focused dimension, up/down (or k/j) move
// between dimensions and the queue's questions (a digit picks a scale's value or a choice's
// option of that number), 0 or Backspace clears the focused one, a/r/f set the verdict,
// e opens the observation editor, t/c go to the tags/comment, Ctrl+Enter in a text field
// saves and goes on, s saves, n saves and goes to the next step or item, x skips the item
// and ! flags it (a queue), g/h show or hide the guidelines/earlier steps, ? the shortcuts.
// Other keys typed into a text field are text.
(function () {
  "use strict";
  var form = document.getElementById("annotation-form");
  if (!form) return;
  var rows = Array.prototype.slice.call(form.querySelectorAll(".rating-row"));
  var focused = 0;

  function show(index, quiet) {
    focused = Math.max(0, Math.min(rows.length - 1, index));
    rows.forEach(function (row, i) {
      row.classList.toggle("focused", i === focused);
      if (i === focused) row.setAttribute("aria-current", "true");
      else row.removeAttribute("aria-current");
    });
    if (!quiet && rows[focused] && rows[focused].scrollIntoView) rows[focused].scrollIntoView({ block: "nearest" });
  }

  function nameOf(row) {
    return row.dataset.name || "rating_" + row.dataset.dimension;
  }

  function choose(name, value) {
    var input = form.querySelector('input[name="' + name + '"][value="' + value + '"]');
    if (input) input.checked = true;
    return !!input;
  }

  function inputs(row) {
    return Array.prototype.slice.call(row.querySelectorAll("input"));
  }

  // a digit on the focused row: true when it set something
  function pick(row, key) {
    var kind = row.dataset.kind || "rating";
    var n = parseInt(key, 10);
    if (kind === "rating") return key !== "0" && choose(nameOf(row), key);
    if (kind === "scale") return choose(nameOf(row), key);
    if (kind === "single" || kind === "multi") {
      // the options of the row in order (the trailing "none" of a single choice left out)
      var options = inputs(row).filter(function (i) { return i.value !== ""; });
      var option = options[n - 1];
      if (!option) return false;
      option.checked = kind === "multi" ? !option.checked : true;
      return true;
    }
    return false;
  }

  function clear(row) {
    var kind = row.dataset.kind || "rating";
    if (kind === "text") {
      row.querySelector("textarea").value = "";
    } else if (kind === "multi") {
      inputs(row).forEach(function (i) { i.checked = false; });
    } else {
      choose(nameOf(row), "");
    }
  }

  var sending = false;
  function submit(then) {
    if (sending) return;  // one save at a time (a key held down repeats)
    sending = true;
    document.getElementById("annotation-then").value = then || "";
    form.submit();
  }

  function toggle(id) {
    var el = document.getElementById(id);
    if (!el) return false;
    if (el.tagName === "DETAILS") el.open = !el.open;
    else el.hidden = !el.hidden;
    return true;
  }

  // the skip and flag panels: open with their field focused; Esc closes them
  function openPanel(panelId, fieldId) {
    var panel = document.getElementById(panelId);
    if (!panel) return false;
    ["skip-panel", "flag-panel"].forEach(function (id) {
      var other = document.getElementById(id);
      if (other && other !== panel) other.hidden = true;
    });
    panel.hidden = false;
    document.getElementById(fieldId).focus();
    return true;
  }

  function closePanels() {
    ["skip-panel", "flag-panel"].forEach(function (id) {
      var panel = document.getElementById(id);
      if (panel) panel.hidden = true;
    });
  }

  // a click or Tab into a row's choices makes it the focused one
  rows.forEach(function (row, i) {
    row.addEventListener("focusin", function () { show(i, true); });
    row.addEventListener("click", function () { show(i, true); });
  });

  var verdicts = { a: "accept", r: "reject", f: "needs_fix" };
  var fields = { t: "annotation-tags", c: "annotation-comment" };

  document.addEventListener("keydown", function (event) {
    var target = event.target;
    var typing = target && (target.tagName === "TEXTAREA" || (target.tagName === "INPUT" && target.type !== "radio" && target.type !== "checkbox"));
    if (typing) {
      if (event.key === "Escape") {
        target.blur();
        if (target.closest("#skip-panel, #flag-panel")) closePanels();
      } else if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
        if (target.form && target.form !== form) target.form.submit();  // skip, flag
        else if (target.form === form) submit("next");
        else return;
        event.preventDefault();
      }
      return;
    }
    if (event.ctrlKey || event.metaKey || event.altKey || event.repeat) return;
    var key = event.key;
    var row = rows[focused];
    if (key >= "0" && key <= "9") {
      // 0 clears, unless it is a value of the focused scale
      if (key === "0" && !(row.dataset.kind === "scale" && row.dataset.min === "0")) {
        clear(row);
      } else if (pick(row, key)) {
        // on to the next row after a rating or a one-value answer
        if (row.dataset.kind !== "multi" && focused < rows.length - 1) show(focused + 1);
      } else {
        return;
      }
    } else if (key === "Backspace" || key === "Delete") {
      clear(row);
    } else if (key === "ArrowDown" || key === "j") {
      show(focused + 1);
    } else if (key === "ArrowUp" || key === "k") {
      show(focused - 1);
    } else if (key === "Enter" && row && row.dataset.kind === "text") {
      row.querySelector("textarea").focus();
    } else if (key === "q") {
      var first = rows.findIndex(function (r) { return r.classList.contains("question-row"); });
      if (first < 0) return;
      show(first);
    } else if (verdicts[key]) {
      choose("verdict", verdicts[key]);
    } else if (fields[key]) {
      document.getElementById(fields[key]).focus();
    } else if (key === "e") {
      var details = document.getElementById("correction");
      details.open = true;
      document.getElementById("corrected-observation").focus();
    } else if (key === "s") {
      submit("");
    } else if (key === "n") {
      submit("next");
    } else if (key === "x") {
      if (!openPanel("skip-panel", "skip-reason")) return;
    } else if (key === "!") {
      if (!openPanel("flag-panel", "flag-note")) return;
    } else if (key === "g") {
      if (!toggle("guidelines")) return;
    } else if (key === "h") {
      if (!toggle("earlier-steps")) return;
    } else if (key === "?") {
      toggle("shortcuts");
    } else if (key === "Escape") {
      closePanels();
    } else {
      return;
    }
    event.preventDefault();
  });

  var next = document.getElementById("annotation-next");
  if (next) next.addEventListener("click", function () {
    document.getElementById("annotation-then").value = "next";
  });
  // An observation longer than the page shows is not put in the editor with the page (it
  // would be on it twice): asked for, it is loaded whole from its Show all address, so a
  // correction is always made from the whole of it.
  var load = document.getElementById("correction-load");
  if (load) load.addEventListener("click", function () {
    var editor = document.getElementById("corrected-observation");
    load.disabled = true;
    load.textContent = "Loading…";
    fetch(load.dataset.url, { credentials: "same-origin" }).then(function (response) {
      if (!response.ok) throw new Error("the server answered " + response.status);
      return response.text();
    }).then(function (text) {
      editor.value = text;
      editor.removeAttribute("data-cut");
      load.textContent = "Loaded: the editor holds the whole observation";
      editor.focus();
    }).catch(function (error) {
      load.disabled = false;
      load.textContent = "Could not load it (" + error.message + "): try again";
    });
  });
  show(0, true);
  form.dataset.keys = "ready";  // the shortcuts listen from here on (tests wait for it)
})();
