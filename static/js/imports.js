// Upload progress for the import form: htmx reports XHR upload progress as htmx:xhr:progress.
(function () {
  "use strict";
  function bar(form) {
    return form.querySelector(".upload-progress");
  }
  document.addEventListener("htmx:xhr:progress", function (evt) {
    var form = evt.target.closest ? evt.target.closest("#import-form") : null;
    if (!form || !evt.detail.lengthComputable) return;
    var box = bar(form);
    var pct = Math.round((evt.detail.loaded / evt.detail.total) * 100);
    box.hidden = false;
    box.querySelector(".progress > div").style.width = pct + "%";
    box.querySelector(".progress").setAttribute("aria-valuenow", String(pct));
    box.querySelector(".upload-progress-text").textContent =
      pct < 100 ? "Uploading… " + pct + "%" : "Uploaded; starting the import…";
  });
  document.addEventListener("htmx:beforeRequest", function (evt) {
    var form = evt.target.closest ? evt.target.closest("#import-form") : null;
    if (!form) return;
    bar(form).hidden = false;
    var button = form.querySelector("button[type=submit]");
    if (button) button.disabled = true;
  });
})();
