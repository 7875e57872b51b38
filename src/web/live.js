// agentstore dashboard: live updates. Pages are complete without this script; with it, a
// page whose <main> has data-live is fetched again (and its <main> swapped) shortly after the
// event stream (/api/v1/events, the daemons' D-Bus signals) reports a change.
(function () {
  "use strict";
  var main = document.querySelector("main[data-live]");
  if (!main || !window.EventSource) { return; }
  var pending = null;
  function refresh() {
    pending = null;
    fetch(location.href, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (!html) { return; }
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.querySelector("main[data-live]");
        if (fresh) { main.innerHTML = fresh.innerHTML; document.body.dataset.updated = String(Date.now()); }
      })
      .catch(function () {});
  }
  var es = new EventSource("/api/v1/events");
  function changed() { if (!pending) { pending = setTimeout(refresh, 150); } }
  ["JobStateChanged", "JobCreated", "PropertiesChanged", "ApprovalRequested",
   "ApprovalAnswered", "MachineStateChanged"].forEach(function (n) {
    es.addEventListener(n, changed);
  });
  es.addEventListener("open", function () { document.body.dataset.live = "connected"; });
})();
