// Live progress of a run: the server's task stream (Server-Sent Events), shown in the bar and its text; when the
// run ends the page reloads to draw its charts. Text only (textContent), never markup.
(function () {
  "use strict";
  var box = document.getElementById("progress");
  if (!box || box.dataset.live !== "yes" || !window.EventSource) { return; }
  var bar = document.getElementById("progress-bar");
  var text = document.getElementById("progress-text");
  var status = document.getElementById("task-status");
  var source = new EventSource(box.dataset.events);
  function show(view) {
    var p = view.progress || {};
    bar.max = p.total || 1;
    bar.value = p.done || 0;
    var line = (p.done || 0) + "/" + (p.total || 0) + " " + (p.unit || "points");
    if (p.date) { line += ", at " + p.date; }
    if (p.equity !== null && p.equity !== undefined) {
      line += ", equity " + p.equity.toLocaleString("en-US", {minimumFractionDigits: 2, maximumFractionDigits: 2});
    }
    text.textContent = line;
    status.textContent = view.status;
  }
  source.addEventListener("progress", function (e) { show(JSON.parse(e.data)); });
  source.addEventListener("end", function (e) {
    show(JSON.parse(e.data));
    source.close();
    window.location.reload();
  });
  source.addEventListener("error", function (e) {
    if (e.data) { text.textContent = "progress stream: " + JSON.parse(e.data).message; }
    source.close();
  });
}());
