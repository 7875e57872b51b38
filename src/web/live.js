// agentstore dashboard: live updates. Pages are complete without this script; with it, a
// page whose <main> has data-live is fetched again (and its <main> swapped) shortly after the
// event stream (/api/v1/events, the daemons' D-Bus signals) reports a change.
(function () {
  "use strict";
  followLog();
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
        if (!fresh) { return; }
        // The job page's log is followed on its own (below): keep the lines already shown.
        var log = main.querySelector("#joblog");
        main.innerHTML = fresh.innerHTML;
        var slot = main.querySelector("#joblog");
        if (log && slot) { slot.replaceWith(log); }
        document.body.dataset.updated = String(Date.now());
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

// The job page's log (<pre id="joblog">, its first lines drawn by the server): the lines
// after its cursor, from GET /api/v1/jobs/{id}/log, every second until the job has ended.
function followLog() {
  "use strict";
  var pre = document.getElementById("joblog");
  if (!pre || !window.fetch || pre.dataset.ended === "true") { return; }
  var after = pre.dataset.after || "";
  function poll() {
    var url = "/api/v1/jobs/" + encodeURIComponent(pre.dataset.job) + "/log?after=" +
      encodeURIComponent(after);
    fetch(url, { credentials: "same-origin" })
      .then(function (r) {
        return r.json().then(function (v) { if (!r.ok) { throw v; } return v; });
      })
      .then(function (a) {
        if (a.lines.length && pre.dataset.empty === "true") {
          pre.textContent = "";
          pre.dataset.empty = "false";
        }
        a.lines.forEach(function (l) { pre.appendChild(document.createTextNode(l + "\n")); });
        after = a.cursor;
        if (a.more) { setTimeout(poll, 0); return; }
        if (a.ended) { pre.dataset.ended = "true"; return; }
        setTimeout(poll, 1000);
      })
      .catch(function (e) {
        pre.dataset.error = (e && e.message) || "the log could not be read";
        setTimeout(poll, 5000);
      });
  }
  poll();
}
