// django-durable-jobs: refresh an element marked data-djdj-refresh="SECONDS" by
// fetching this page again and swapping that element's content. Paused while the
// tab is hidden; a failed fetch keeps the figures shown and tries again later.
(function () {
  "use strict";
  var box = document.querySelector("[data-djdj-refresh]");
  if (!box || !window.fetch) { return; }
  var every = Math.max(5, parseInt(box.getAttribute("data-djdj-refresh"), 10) || 30) * 1000;
  var timer = null;

  function refresh() {
    timer = null;
    if (document.hidden) { return; }
    fetch(window.location.href, { credentials: "same-origin", headers: { "X-Requested-With": "fetch" } })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) {
        if (html === null) { return; }
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById(box.id);
        if (fresh) { box.innerHTML = fresh.innerHTML; }
      })
      .catch(function () {})
      .then(schedule);
  }

  function schedule() {
    if (timer === null && !document.hidden) { timer = window.setTimeout(refresh, every); }
  }

  document.addEventListener("visibilitychange", function () {
    if (document.hidden) {
      if (timer !== null) { window.clearTimeout(timer); timer = null; }
    } else {
      refresh();  // back on the tab: show fresh figures at once
    }
  });
  schedule();
})();
