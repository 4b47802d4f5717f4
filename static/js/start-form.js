// The start form (task page): the command box and the files field belong to the command agent
// alone, so they show only while it is chosen; hidden, they are disabled and not sent.
(function () {
  "use strict";
  function sync(form) {
    var select = form.querySelector("select[name=agent]");
    if (!select) return;
    form.querySelectorAll("[data-agent-only]").forEach(function (element) {
      var shown = element.getAttribute("data-agent-only") === select.value;
      element.style.display = shown ? "" : "none";
      var inputs = element.matches("input") ? [element] : element.querySelectorAll("input");
      inputs.forEach(function (input) { input.disabled = !shown; });
    });
  }
  document.addEventListener("change", function (event) {
    if (event.target.matches("form.start select[name=agent]")) sync(event.target.form);
  });
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("form.start").forEach(sync);
  });
})();
