// World editor: "Add ..." appends an empty row to its part (Django formset: the template's
// __prefix__ becomes the next index, TOTAL_FORMS counts it), then the preview refreshes.
(function () {
  document.addEventListener("click", function (event) {
    var button = event.target.closest(".add-row");
    if (!button) return;
    var section = button.closest(".world-part");
    var prefix = button.dataset.prefix;
    var total = section.querySelector("#id_" + prefix + "-TOTAL_FORMS");
    var template = section.querySelector("template.empty-row");
    var index = parseInt(total.value, 10);
    var html = template.innerHTML.replace(/__prefix__/g, String(index));
    section.querySelector(".part-rows").insertAdjacentHTML("beforeend", html);
    total.value = String(index + 1);
    var first = section.querySelector(".part-rows .part-row:last-child input, .part-rows .part-row:last-child textarea");
    if (first) first.focus();
  });
})();
