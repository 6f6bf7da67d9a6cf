// Pulse dashboard: refresh the page's live part in place, and send button forms without a
// full reload. No build step, no dependencies. Without JavaScript every page still works.
(function () {
  "use strict";
  const live = document.getElementById("live");
  const notice = document.getElementById("notice");

  function show(text) {
    if (!notice) return;
    notice.textContent = text;
    notice.hidden = !text;
  }

  // A form in the live part that someone is filling in (a pause's reason or until typed, "cancel
  // the current run" ticked, or a field focused) is not replaced under them by a refresh.
  function editing() {
    if (!live) return false;
    return Array.from(live.querySelectorAll("input:not([type=hidden])")).some(function (input) {
      if (input === document.activeElement) return true;
      return input.type === "checkbox"
        ? input.checked !== input.defaultChecked
        : input.value !== input.defaultValue;
    });
  }

  async function refresh() {
    if (!live || editing()) return;
    const url = new URL(window.location.href);
    url.searchParams.set("fragment", "1");
    url.searchParams.delete("notice");
    try {
      const response = await fetch(url, { credentials: "same-origin", cache: "no-store" });
      if (response.status === 401 || response.redirected) {
        window.location.assign("/ui/login");
        return;
      }
      if (response.ok) live.innerHTML = await response.text();
    } catch (err) {
      show("Connection lost; retrying…");
    }
  }

  document.addEventListener("submit", async function (event) {
    const form = event.target;
    if (!(form instanceof HTMLFormElement) || !form.hasAttribute("data-action")) return;
    event.preventDefault();
    const response = await fetch(form.action, {
      method: "POST",
      body: new URLSearchParams(new FormData(form)),
      headers: { Accept: "application/json" },
      credentials: "same-origin",
    });
    const body = await response.json().catch(function () { return {}; });
    show(body.notice || (body.error && body.error.message) || "");
    if (response.ok) {  // done: the form is the page's again (a refusal keeps what was typed)
      form.reset();
      if (document.activeElement instanceof HTMLElement) document.activeElement.blur();
    }
    await refresh();
  });

  if (live) {
    const every = Number(live.dataset.refresh) || 2000;
    window.setInterval(refresh, every);
  }
})();
