// The console keeps itself current: the server says when the fleet
// changed (/api/v1/stream, server-sent events), and the page fetches
// itself again and replaces the parts marked data-live. The filters, a
// form being filled in and the scroll stay as they are. Without this
// script the page refreshes itself every minute.
(function () {
  "use strict";
  var status = document.getElementById("live-status");
  var minGap = 2000, last = 0, timer = null, busy = false;
  function say(text) { if (status) { status.textContent = text; } }
  function refresh() {
    timer = null;
    if (busy) { schedule(); return; }
    busy = true; last = Date.now();
    fetch(location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) { if (!r.ok) { throw new Error("HTTP " + r.status); } return r.text(); })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html");
        document.querySelectorAll("[data-live]").forEach(function (el) {
          var n = fresh.getElementById(el.id);
          if (n && n.innerHTML !== el.innerHTML) { el.innerHTML = n.innerHTML; }
        });
        say("updated " + new Date().toLocaleTimeString());
      })
      .catch(function (e) { say("not updated: " + e.message); })
      .finally(function () { busy = false; });
  }
  function schedule() {
    if (timer) { return; }
    timer = setTimeout(refresh, Math.max(0, minGap - (Date.now() - last)));
  }
  if (window.EventSource) {
    var es = new EventSource("/api/v1/stream");
    es.onmessage = schedule;
    es.onerror = function () { say("reconnecting…"); };
  } else {
    setInterval(refresh, 10000);
  }
})();
