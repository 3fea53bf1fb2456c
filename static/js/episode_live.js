// A running episode's trajectory page (templates/trajectories/trajectory.html): htmx polls
// #episode-live every few seconds for the steps after the last one shown
// (studio.views.trajectories.trajectory_live); they come in the aligned windows they belong
// to and are added here: into the page's window of that start (which then ends later), or
// as a new window after the last. The server says 286 once the episode ended, and htmx
// stops polling.
(function () {
  "use strict";
  var live = document.getElementById("episode-live");
  var incoming = document.getElementById("episode-incoming");
  var steps = document.getElementById("steps");
  if (!live || !incoming || !steps) return;

  function windowAt(start) {
    return steps.querySelector('.step-window[data-start="' + start + '"]');
  }

  // The first step index the page lacks, or null when the page does not show the end of
  // the branch (its scroll sentinel, or an emptied window, loads the steps below).
  function nextIndex() {
    if (steps.querySelector(".steps-next")) return null;
    var windows = steps.querySelectorAll(".step-window");
    if (!windows.length) return steps.querySelector("article.step") ? null : 0;
    var last = windows[windows.length - 1];
    if (last.classList.contains("placeholder")) return null;
    return parseInt(last.dataset.end, 10) + 1;
  }

  document.body.addEventListener("htmx:configRequest", function (evt) {
    if (evt.detail.elt !== live) return;
    var after = nextIndex();
    if (after !== null) evt.detail.parameters.after = after;
  });
  document.body.addEventListener("htmx:beforeRequest", function (evt) {
    if (evt.detail.elt === live && document.hidden) evt.preventDefault(); // a background tab
  });
  document.body.addEventListener("htmx:afterSwap", function (evt) {
    if (evt.detail.target !== incoming) return;
    var holder = incoming.querySelector(".episode-incoming-steps");
    if (!holder) return;
    holder.querySelectorAll(".step-window").forEach(function (win) {
      var start = win.dataset.start;
      var existing = windowAt(start);
      if (existing && existing.classList.contains("placeholder")) return; // loaded again later, whole
      var fresh = Array.prototype.filter.call(win.querySelectorAll("article.step"), function (a) {
        return !steps.querySelector("#" + a.id); // never a step twice
      });
      if (!fresh.length) return;
      var empty = steps.querySelector(".empty-steps");
      if (empty) empty.remove();
      if (existing) {
        fresh.forEach(function (a) { existing.appendChild(a); });
        existing.dataset.end = String(Math.max(parseInt(existing.dataset.end, 10), parseInt(win.dataset.end, 10)));
        delete existing.dataset.elements; // counted again by the page's window keeping
      } else {
        win.querySelectorAll("article.step").forEach(function (a) { if (fresh.indexOf(a) < 0) a.remove(); });
        steps.appendChild(win);
      }
    });
    var root = document.getElementById("trajectory");
    if (root && holder.dataset.total) root.dataset.total = holder.dataset.total;
    var jump = document.getElementById("jump-input");
    if (jump && holder.dataset.total) {
      var top = Math.max(0, parseInt(holder.dataset.total, 10) - 1);
      jump.max = String(top);
      jump.placeholder = "0–" + top;
    }
    incoming.textContent = "";
  });
})();
