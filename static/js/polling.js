// Live regions poll with hx-trigger="every Ns, visibilitychange from:document". While the tab
// is hidden their requests are dropped (nothing is fetched for nobody); when it shows again the
// visibilitychange trigger refreshes them at once.
(function () {
  "use strict";
  document.addEventListener("htmx:beforeRequest", function (event) {
    if (document.visibilityState !== "hidden") return;
    var element = event.detail && event.detail.elt;
    var trigger = (element && element.getAttribute && element.getAttribute("hx-trigger")) || "";
    if (/\bevery\b/.test(trigger)) event.preventDefault();
  });
})();
