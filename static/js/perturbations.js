// The perturbation form shows the parameters of the chosen kind only (all are sent; the
// server reads the chosen kind's). Without JavaScript every group shows, labelled.
(function () {
  function sync() {
    var kind = document.getElementById("id_kind");
    if (!kind) return;
    document.querySelectorAll("fieldset.kind-params").forEach(function (fs) {
      fs.hidden = fs.dataset.kind !== kind.value;
    });
  }
  document.addEventListener("DOMContentLoaded", function () {
    var kind = document.getElementById("id_kind");
    if (kind) kind.addEventListener("change", sync);
    sync();
  });
})();
