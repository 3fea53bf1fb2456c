// Small page behaviours shared by every studio page; page-specific code lives beside it.
(function () {
  "use strict";
  // htmx: let 4xx responses with a form re-render in place (validation errors, and a limit
  // reached: 413 too large, 429 too many).
  document.addEventListener("htmx:beforeSwap", function (evt) {
    var status = evt.detail.xhr.status;
    if (status === 400 || status === 413 || status === 422 || status === 429) {
      evt.detail.shouldSwap = true;
      evt.detail.isError = false;
    }
  });
})();
