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
  // An upload form (data-max-upload-bytes) refuses a file over the studio's limit before a
  // byte is sent, with the server's own words; in the capture phase, so htmx never sends it.
  document.addEventListener("submit", function (evt) {
    var form = evt.target;
    var limit = form && form.dataset ? Number(form.dataset.maxUploadBytes) : 0;
    if (!limit) return;
    var inputs = form.querySelectorAll("input[type=file]");
    for (var i = 0; i < inputs.length; i++) {
      var files = inputs[i].files || [];
      for (var j = 0; j < files.length; j++) {
        if (files[j].size > limit) {
          evt.preventDefault();
          evt.stopPropagation();
          var box = form.querySelector(".upload-refusal");
          if (!box) {
            box = document.createElement("div");
            box.className = "error upload-refusal";
            box.setAttribute("role", "alert");
            inputs[i].insertAdjacentElement("afterend", box);
          }
          box.textContent = files[j].name + " is larger than the upload limit of " +
            form.dataset.maxUploadLabel + " a file (STUDIO_MAX_UPLOAD_MB); nothing was sent.";
          return;
        }
      }
    }
    var old = form.querySelector(".upload-refusal");
    if (old) old.remove();
  }, true);
})();
