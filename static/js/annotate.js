// Annotating a step from the keyboard: 1-5 rate the focused dimension, up/down (or k/j) move
// between dimensions, a/r/f set the verdict, e opens the observation editor, s saves, n saves
// and goes to the next step, ? shows the shortcuts. Keys typed into a text field are text.
(function () {
  "use strict";
  var form = document.getElementById("annotation-form");
  if (!form) return;
  var rows = Array.prototype.slice.call(form.querySelectorAll(".rating-row"));
  var focused = 0;

  function show(index) {
    focused = Math.max(0, Math.min(rows.length - 1, index));
    rows.forEach(function (row, i) {
      row.classList.toggle("focused", i === focused);
      if (i === focused) row.setAttribute("aria-current", "true");
      else row.removeAttribute("aria-current");
    });
  }

  function choose(name, value) {
    var input = form.querySelector('input[name="' + name + '"][value="' + value + '"]');
    if (input) input.checked = true;
  }

  var sending = false;
  function submit(then) {
    if (sending) return;  // one save at a time (a key held down repeats)
    sending = true;
    document.getElementById("annotation-then").value = then || "";
    form.submit();
  }

  // a click or Tab into a dimension's choices makes it the focused one
  rows.forEach(function (row, i) {
    row.addEventListener("focusin", function () { show(i); });
    row.addEventListener("click", function () { show(i); });
  });

  var verdicts = { a: "accept", r: "reject", f: "needs_fix" };

  document.addEventListener("keydown", function (event) {
    var target = event.target;
    var typing = target && (target.tagName === "TEXTAREA" || (target.tagName === "INPUT" && target.type !== "radio"));
    if (typing) {
      if (event.key === "Escape") target.blur();
      return;
    }
    if (event.ctrlKey || event.metaKey || event.altKey || event.repeat) return;
    var key = event.key;
    if (key >= "1" && key <= "5") {
      choose("rating_" + rows[focused].dataset.dimension, key);
      if (focused < rows.length - 1) show(focused + 1);  // on to the next dimension
    } else if (key === "ArrowDown" || key === "j") {
      show(focused + 1);
    } else if (key === "ArrowUp" || key === "k") {
      show(focused - 1);
    } else if (verdicts[key]) {
      choose("verdict", verdicts[key]);
    } else if (key === "e") {
      var details = document.getElementById("correction");
      details.open = true;
      document.getElementById("corrected-observation").focus();
    } else if (key === "s") {
      submit("");
    } else if (key === "n") {
      submit("next");
    } else if (key === "?") {
      var panel = document.getElementById("shortcuts");
      panel.hidden = !panel.hidden;
    } else {
      return;
    }
    event.preventDefault();
  });

  var next = document.getElementById("annotation-next");
  if (next) next.addEventListener("click", function () {
    document.getElementById("annotation-then").value = "next";
  });
  show(0);
  form.dataset.keys = "ready";  // the shortcuts listen from here on (tests wait for it)
})();
