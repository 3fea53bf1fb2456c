// The campaign pages. The new-campaign form lists only the chosen world's tasks (the server
// checks the choice again); on a campaign's page the dataset form's name follows the
// episodes and turns chosen while it is still a default name (a dataset holds one kind of
// turns); a refused queue or dataset's error is scrolled into view. Without JavaScript every
// world's tasks show, grouped by world, the server gives a default name left as it was the
// choices' own, and the error is also at the top of the page (the messages).
(function () {
  function filterTasks() {
    var world = document.querySelector("#campaign-form select[name=world]");
    var tasks = document.querySelector("#campaign-form select[name=task_ids]");
    if (!world || !tasks) return;
    var chosen = world.value;
    tasks.querySelectorAll("option").forEach(function (opt) {
      var ofWorld = opt.value.split(":")[0];
      var hide = chosen !== "" && ofWorld !== chosen;
      opt.hidden = hide;
      opt.disabled = hide;
      if (hide) opt.selected = false;
    });
    tasks.querySelectorAll("optgroup").forEach(function (group) {
      group.hidden = !group.querySelector("option:not([hidden])");
    });
  }

  function followNames() {
    var form = document.getElementById("campaign-dataset-form");
    var data = document.getElementById("campaign-dataset-names");
    if (!form || !data) return;
    var names = JSON.parse(data.textContent);
    var defaults = Object.keys(names).map(function (k) { return names[k]; });
    var name = form.querySelector("input[name=dataset_name]");
    function update() {
      var which = form.querySelector("select[name=which]");
      var turns = form.querySelector("input[name=turns]:checked");
      if (!name || !which || !turns) return;
      if (defaults.indexOf(name.value.trim()) === -1) return; // typed by the person: kept
      var next = names[which.value + ":" + turns.value];
      if (next) name.value = next;
    }
    form.addEventListener("change", function (evt) {
      if (evt.target.name === "which" || evt.target.name === "turns") update();
    });
    update();
  }

  // A refused queue or dataset comes back as the page with the form's error above its
  // button: shown in view, not below the fold.
  function showActionError() {
    var error = document.querySelector("#campaign-actions .action-errors");
    if (error) error.scrollIntoView({ block: "center" });
  }

  document.addEventListener("DOMContentLoaded", function () {
    showActionError();
    var world = document.querySelector("#campaign-form select[name=world]");
    if (world) world.addEventListener("change", filterTasks);
    filterTasks();
    followNames();
  });
})();
