// Progressive enhancement only: every page works without this file.
(function () {
  "use strict";
  // copy buttons for the preformatted tables
  document.querySelectorAll("pre.table[id]").forEach(function (pre) {
    var btn = document.createElement("button");
    btn.type = "button";
    btn.className = "copy";
    btn.textContent = "copy";
    btn.setAttribute("data-copy", pre.id);
    btn.addEventListener("click", function () {
      navigator.clipboard.writeText(pre.textContent).then(function () {
        btn.textContent = "copied";
        setTimeout(function () { btn.textContent = "copy"; }, 1500);
      }, function () { btn.textContent = "select and copy"; });
    });
    pre.parentNode.insertBefore(btn, pre);
  });
  // pending series: poll the state instead of reloading the whole page
  var poll = document.querySelector("[data-poll]");
  if (poll) {
    var url = poll.getAttribute("data-poll");
    var last = poll.getAttribute("data-state-key");
    var tick = function () {
      fetch(url, { headers: { "Accept": "application/json" } })
        .then(function (r) { return r.json(); })
        .then(function (j) {
          if (j.state_key !== last) { window.location.reload(); return; }
          setTimeout(tick, 2000);
        }, function () { setTimeout(tick, 5000); });
    };
    setTimeout(tick, 2000);
  }
})();
