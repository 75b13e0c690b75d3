// Berth console: the live views. An element with data-live names a stream
// of server-sent events; each `update` event carries the element's new
// content, made and escaped on the server.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  for (const view of document.querySelectorAll("[data-live]")) {
    const events = new EventSource(view.dataset.live);
    events.addEventListener("update", (e) => {
      view.innerHTML = e.data;
      view.dataset.updated = String(Number(view.dataset.updated || "0") + 1);
    });
    // A stream the server ended (signed out, an hour gone) is opened again
    // by the browser; a refusal ends it for good.
    events.addEventListener("refused", () => events.close());
  }
  // A form that undoes work (delete, drain, roll back) asks first, in the
  // words its data-confirm gives.
  for (const form of document.querySelectorAll("form[data-confirm]")) {
    form.addEventListener("submit", (e) => {
      if (!window.confirm(form.dataset.confirm)) e.preventDefault();
    });
  }
});
