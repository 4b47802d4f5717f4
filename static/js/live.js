// Live refresh that keeps the reader's place. A polled region (the attempt page's header and
// verdict, the attempts table, a run, a pool, the scores panel, the check tab) is not replaced
// whole each time: its new HTML is laid over the old node by node, so nothing changes when
// nothing changed, and a focused button, a table scrolled sideways or a tail scrolled up keep
// their place. Only when the region's own htmx attributes change (it stops polling) does htmx
// swap it whole; scroll positions and focus are then carried over by hand.
// Status changes are said aloud through the page's status region (#live-note, role=status).
// Scrolling output gets tabindex=0 so a keyboard can scroll it, and a table or box that scrolls
// sideways says so: data-scroll="left right" names the sides it hides, which boltz.css fades.
(function () {
  "use strict";

  function isHtmxAttr(name) { return /^(data-)?hx-/.test(name); }
  function ownClasses(el) {
    return (el.getAttribute("class") || "").split(/\s+/).filter(function (c) {
      return c && !/^htmx-/.test(c);
    });
  }
  // Attributes the page changes by itself and a refresh must leave alone.
  function keptByClient(el, name) {
    if (name === "open" && el.tagName === "DETAILS") return true;
    if ((name === "tabindex" || name === "data-scrollfocus") && el.hasAttribute("data-scrollfocus")) return true;
    if (name === "data-scroll") return true;
    return false;
  }
  function htmxAttrsDiffer(cur, inc) {
    var names = new Set();
    [cur, inc].forEach(function (el) {
      Array.prototype.forEach.call(el.attributes, function (a) { if (isHtmxAttr(a.name)) names.add(a.name); });
    });
    var differ = false;
    names.forEach(function (n) { if (cur.getAttribute(n) !== inc.getAttribute(n)) differ = true; });
    return differ;
  }
  function syncAttrs(cur, inc) {
    Array.prototype.slice.call(cur.attributes).forEach(function (a) {
      if (a.name !== "class" && !inc.hasAttribute(a.name) && !keptByClient(cur, a.name)) cur.removeAttribute(a.name);
    });
    Array.prototype.forEach.call(inc.attributes, function (a) {
      if (a.name === "class" || keptByClient(cur, a.name)) return;
      if (cur.getAttribute(a.name) !== a.value) cur.setAttribute(a.name, a.value);
    });
    var want = ownClasses(inc).join(" ");
    if (ownClasses(cur).join(" ") !== want) {
      var htmxOnes = (cur.getAttribute("class") || "").split(/\s+/).filter(function (c) { return /^htmx-/.test(c); });
      var value = ownClasses(inc).concat(htmxOnes).join(" ");
      if (value) cur.setAttribute("class", value); else cur.removeAttribute("class");
    }
  }

  // Lay `inc` over `cur`; returns the node now in the page.
  function morph(cur, inc) {
    if (cur.nodeType !== inc.nodeType || cur.nodeName !== inc.nodeName) {
      cur.replaceWith(inc);
      return inc;
    }
    if (cur.nodeType !== 1) {
      if (cur.nodeValue !== inc.nodeValue) cur.nodeValue = inc.nodeValue;
      return cur;
    }
    if (htmxAttrsDiffer(cur, inc)) { // htmx must see it anew (another request, polling stopped)
      cur.replaceWith(inc);
      return inc;
    }
    syncAttrs(cur, inc);
    if (cur.tagName === "TEXTAREA" || (cur.tagName === "INPUT" && document.activeElement === cur)) return cur;
    morphChildren(cur, inc);
    return cur;
  }

  function keyOf(node) { return node.nodeType === 1 && node.id ? node.id : null; }

  function morphChildren(cur, inc) {
    var incoming = Array.prototype.slice.call(inc.childNodes);
    var byId = new Map();
    var loose = [];
    Array.prototype.forEach.call(cur.childNodes, function (n) {
      var key = keyOf(n);
      if (key) byId.set(key, n); else loose.push(n);
    });
    var next = 0;
    var cursor = cur.firstChild;
    incoming.forEach(function (n) {
      var key = keyOf(n);
      var match = null;
      if (key) {
        match = byId.get(key) || null;
        byId.delete(key);
      } else {
        while (next < loose.length && loose[next].nodeName !== n.nodeName) next += 1;
        if (next < loose.length) { match = loose[next]; next += 1; }
      }
      var node = match ? morph(match, n) : n;
      if (node === cursor) cursor = cursor.nextSibling;
      else cur.insertBefore(node, cursor); // new, or moved ahead of what it replaced
    });
    while (cursor) { var after = cursor.nextSibling; cur.removeChild(cursor); cursor = after; }
  }

  // --- scroll positions and focus, for a swap htmx does whole --------------------------------
  function scrolled(root) {
    var found = [];
    var all = root.querySelectorAll("*");
    for (var i = 0; i < all.length; i += 1) {
      var el = all[i];
      if (el.scrollLeft || el.scrollTop) {
        found.push({ sel: el.tagName + "." + ownClasses(el).join("."), nth: indexAmong(root, el), left: el.scrollLeft, top: el.scrollTop });
      }
    }
    return found;
  }
  function indexAmong(root, el) {
    var same = root.querySelectorAll(el.tagName);
    return Array.prototype.indexOf.call(same, el);
  }
  function restoreScroll(root, saved) {
    saved.forEach(function (s) {
      var el = root.querySelectorAll(s.sel.split(".")[0])[s.nth];
      if (el) { el.scrollLeft = s.left; el.scrollTop = s.top; }
    });
  }
  var pending = new Map(); // target id -> saved scroll positions

  function isPolled(elt) {
    var trigger = (elt && elt.getAttribute && elt.getAttribute("hx-trigger")) || "";
    return /\bevery\b/.test(trigger);
  }
  function parse(html) {
    return new DOMParser().parseFromString(html, "text/html");
  }

  document.addEventListener("htmx:beforeSwap", function (event) {
    var d = event.detail;
    var elt = d.requestConfig && d.requestConfig.elt;
    var target = d.target;
    if (!d.shouldSwap || !isPolled(elt) || !target || !target.id || !target.firstElementChild) return;
    if ((elt.getAttribute("hx-swap") || "") !== "outerHTML") return;
    var doc = parse(d.serverResponse || "");
    var incoming = doc.getElementById(target.id);
    if (!incoming || doc.querySelector("[hx-swap-oob]")) return;
    if (htmxAttrsDiffer(target, incoming)) { // a whole swap: carry the scroll over
      pending.set(target.id, scrolled(target));
      return;
    }
    d.shouldSwap = false;
    morphChildren(target, incoming);
    syncAttrs(target, incoming);
    (elt.getAttribute("hx-select-oob") || "").split(",").forEach(function (sel) {
      var id = sel.split(":")[0].trim().replace(/^#/, "");
      var here = id && document.getElementById(id);
      var there = id && doc.getElementById(id);
      if (here && there) morph(here, there);
    });
    if (window.htmx) window.htmx.process(target);
    settled();
  });

  document.addEventListener("htmx:oobBeforeSwap", function (event) {
    var d = event.detail;
    var target = d.target;
    var fragment = d.fragment;
    if (!d.shouldSwap || !target || !target.id || !fragment || fragment.childElementCount !== 1) return;
    var incoming = fragment.firstElementChild;
    if (incoming.id !== target.id || incoming.nodeName !== target.nodeName) return;
    if (htmxAttrsDiffer(target, incoming)) return;
    d.shouldSwap = false;
    morphChildren(target, incoming);
    syncAttrs(target, incoming);
    if (window.htmx) window.htmx.process(target);
  });

  document.addEventListener("htmx:afterSettle", function (event) {
    var el = event.target;
    if (el && el.id && pending.has(el.id)) {
      restoreScroll(el, pending.get(el.id));
      pending.delete(el.id);
    }
    settled();
  });

  // --- what a screen reader hears ------------------------------------------------------------
  var said = new Map();
  function statuses() {
    var found = [];
    var title = document.querySelector("#attempt-header h1");
    document.querySelectorAll("#attempt-header .badges .badge").forEach(function (b) {
      found.push([b.id || "badge", (title ? title.textContent.trim() + ": " : "") + b.textContent.trim()]);
    });
    document.querySelectorAll("#attempts tbody tr[id]").forEach(function (row) {
      var link = row.querySelector("td a");
      var badges = Array.prototype.map.call(row.querySelectorAll(".badge:not(a)"), function (b) { return b.textContent.trim(); });
      found.push([row.id, (link ? link.textContent.trim() + ": " : "") + badges.join(", ")]);
    });
    return found;
  }
  function announce(first) {
    var news = [];
    statuses().forEach(function (pair) {
      var before = said.get(pair[0]);
      if (!first && before !== pair[1]) news.push(pair[1]);
      said.set(pair[0], pair[1]);
    });
    var region = document.getElementById("live-note");
    if (region && news.length) region.textContent = news.join(". ");
  }

  // --- scrolling output a keyboard can reach --------------------------------------------------
  function focusableScrollers() {
    document.querySelectorAll("pre:not([tabindex]), .scroll:not([tabindex]), table.grid:not([tabindex])").forEach(function (el) {
      var scrolls = el.scrollHeight > el.clientHeight + 1 || el.scrollWidth > el.clientWidth + 1;
      if (scrolls && !el.querySelector("a[href], button, input, select, textarea, [tabindex]")) {
        el.setAttribute("tabindex", "0");
        el.setAttribute("data-scrollfocus", "");
      }
    });
  }

  // --- a box that scrolls sideways shows it --------------------------------------------------
  var SIDEWAYS = "table.grid, .scroll, table.testgrid";
  function scrollCue(el) {
    var hidden = [];
    if (el.scrollLeft > 1) hidden.push("left");
    if (el.scrollLeft + el.clientWidth < el.scrollWidth - 1) hidden.push("right");
    var want = hidden.join(" ");
    if ((el.getAttribute("data-scroll") || "") === want) return;
    if (want) el.setAttribute("data-scroll", want); else el.removeAttribute("data-scroll");
  }
  function scrollCues() { document.querySelectorAll(SIDEWAYS).forEach(scrollCue); }
  document.addEventListener("scroll", function (event) {
    var el = event.target;
    if (el && el.nodeType === 1 && el.matches(SIDEWAYS)) scrollCue(el);
  }, true);

  function settled() {
    announce(false);
    focusableScrollers();
    scrollCues();
  }

  document.addEventListener("DOMContentLoaded", function () {
    announce(true);
    focusableScrollers();
    scrollCues();
  });
  window.addEventListener("resize", function () { focusableScrollers(); scrollCues(); });
  document.addEventListener("toggle", function () { focusableScrollers(); }, true);
})();
