// The search page (templates/search/search.html): a new sort order searches again at once.
(function () {
  "use strict";
  document.addEventListener("DOMContentLoaded", function () {
    var sort = document.getElementById("id_sort");
    if (sort && sort.form) {
      sort.addEventListener("change", function () { sort.form.requestSubmit(); });
    }
  });
})();
