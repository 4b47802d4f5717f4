/* The attempt page: as you type, the rows of this page whose text matches (Enter searches the
   whole session on the server), the system steps unfolded on request, a jump to a row inside a
   folded group opening it, folds a reviewer opened kept open across live refreshes, live tails
   kept at their bottom. Without this script the page still shows everything, and the search
   form and the jumps still work (the unfold button stays hidden). */
(function () {
  "use strict";
  var opened = new Set(); // ids of <details> the reviewer opened

  function rows() { return document.querySelectorAll("#events li.ev"); }

  function applySearch() {
    var box = document.getElementById("timeline-search");
    if (!box) return;
    var q = box.value.trim().toLowerCase();
    var found = 0;
    rows().forEach(function (li) {
      var hit = !q || li.textContent.toLowerCase().indexOf(q) !== -1;
      li.hidden = !hit;
      if (hit && q) found += 1;
    });
    document.querySelectorAll("#events li.sysgroup").forEach(function (group) {
      var details = group.querySelector("details");
      var any = group.querySelector("li.ev:not([hidden])") !== null;
      group.hidden = Boolean(q) && !any;
      if (q && any && !details.open) { details.open = true; details.dataset.bySearch = "1"; }
      if (!q && details.dataset.bySearch) { details.open = false; delete details.dataset.bySearch; }
    });
    var said = document.getElementById("timeline-found");
    if (said) said.textContent = q ? found + (found === 1 ? " row matches" : " rows match") + " on this page; Enter searches every event" : "";
  }

  function unfold(button) {
    var on = button.getAttribute("aria-pressed") !== "true";
    button.setAttribute("aria-pressed", on ? "true" : "false");
    button.textContent = on ? "Fold system steps" : "Show system steps";
    document.querySelectorAll("#events li.sysgroup > details").forEach(function (d) { d.open = on; });
  }

  function keepTailsAtBottom() {
    document.querySelectorAll("#events pre.live").forEach(function (pre) {
      pre.scrollTop = pre.scrollHeight;
    });
  }

  function restoreOpened() {
    opened.forEach(function (id) {
      var d = document.getElementById(id);
      if (d && d.tagName === "DETAILS" && !d.open) d.open = true;
    });
  }

  document.addEventListener("toggle", function (event) {
    var d = event.target;
    if (!d.id) return;
    if (d.open) opened.add(d.id); else opened.delete(d.id);
  }, true);

  // A jump (#cmd-12, #ev-340) to a row folded away: open its folds, then bring it into view.
  function showTarget() {
    var id = decodeURIComponent(window.location.hash.slice(1));
    var row = id && document.getElementById(id);
    if (!row || !row.closest("#events")) return;
    for (var d = row.closest("details"); d; d = d.parentElement && d.parentElement.closest("details")) {
      d.open = true;
    }
    row.hidden = false;
    row.scrollIntoView({ block: "start" });
  }
  window.addEventListener("hashchange", showTarget);

  document.addEventListener("DOMContentLoaded", function () {
    var unfoldButton = document.getElementById("timeline-unfold");
    if (unfoldButton) unfoldButton.hidden = false;
    showTarget();
    var box = document.getElementById("timeline-search");
    var timer = null;
    if (box) box.addEventListener("input", function () {
      clearTimeout(timer);
      timer = setTimeout(applySearch, 120);
    });
    var button = document.getElementById("timeline-unfold");
    if (button) button.addEventListener("click", function () { unfold(button); });
    keepTailsAtBottom();
  });

  document.addEventListener("htmx:afterSettle", function () {
    restoreOpened();
    keepTailsAtBottom();
    var button = document.getElementById("timeline-unfold");
    if (button && button.getAttribute("aria-pressed") === "true") {
      document.querySelectorAll("#events li.sysgroup > details").forEach(function (d) { d.open = true; });
    }
    applySearch();
  });
})();
