// django-durable-jobs: refresh an element marked data-djdj-refresh="SECONDS" by
// fetching data-djdj-refresh-url (a live run's timeline alone), or this page again
// (the dashboard's figures), and swapping that element's content for the element of
// the same id in the response. Paused while the tab is hidden; a failed fetch
// keeps what is shown and tries again later; stops once the fresh element no longer
// asks for it (the run finished). Open <details> stay open.
(function () {
  "use strict";
  var box = document.querySelector("[data-djdj-refresh]");
  if (!box || !window.fetch) { return; }
  var every = Math.max(5, parseInt(box.getAttribute("data-djdj-refresh"), 10) || 30) * 1000;
  var url = box.getAttribute("data-djdj-refresh-url") || window.location.href;
  var timer = null;
  var stopped = false;

  function refresh() {
    timer = null;
    if (document.hidden) { return; }
    fetch(url, { credentials: "same-origin", headers: { "X-Requested-With": "fetch" } })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) {
        if (html === null) { return; }
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById(box.id);
        if (!fresh) { return; }
        var open = Array.prototype.map.call(box.querySelectorAll("details[open][id]"), function (d) { return d.id; });
        box.innerHTML = fresh.innerHTML;
        open.forEach(function (id) {
          var details = document.getElementById(id);
          if (details) { details.open = true; }
        });
        if (!fresh.hasAttribute("data-djdj-refresh")) { stopped = true; }
      })
      .catch(function () {})
      .then(schedule);
  }

  function schedule() {
    if (timer === null && !stopped && !document.hidden) { timer = window.setTimeout(refresh, every); }
  }

  document.addEventListener("visibilitychange", function () {
    if (document.hidden) {
      if (timer !== null) { window.clearTimeout(timer); timer = null; }
    } else if (!stopped) {
      refresh();  // back on the tab: show fresh figures at once
    }
  });
  schedule();
})();
