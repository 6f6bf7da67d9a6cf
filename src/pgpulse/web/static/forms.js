// Pulse dashboard: the job form and the backfill form. Each sends JSON to the API's own routes
// under /ui/api/v1 (the browser's cookie signs it in; the page's CSRF value goes in a header),
// so what the API refuses the form shows refused, with the API's message naming the field.
(function () {
  "use strict";

  function headers(form) {
    const out = { "Content-Type": "application/json", Accept: "application/json" };
    out[form.dataset.csrfHeader] = form.dataset.csrf;
    return out;
  }

  async function send(form, method, url, body) {
    const response = await fetch(url, {
      method: method,
      headers: headers(form),
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: "same-origin",
    });
    const answer = await response.json().catch(function () { return {}; });
    return { ok: response.ok, status: response.status, body: answer };
  }

  function showError(form, error) {
    const box = form.querySelector("#form-error");
    form.querySelectorAll("[aria-invalid]").forEach(function (el) { el.removeAttribute("aria-invalid"); });
    if (!error) { box.hidden = true; box.textContent = ""; return; }
    box.textContent = error.message || "refused";
    box.hidden = false;
    const field = String(error.field || "").split(/[.[]/)[0];
    const input = field && form.querySelector('[data-field="' + field + '"], [name="' + field + '"]');
    if (input) { input.setAttribute("aria-invalid", "true"); input.focus(); }
  }

  // -- the job form ------------------------------------------------------------------------------

  // An input's value as the API takes it; undefined: leave the field out (its default on create,
  // its stored value on edit).
  function valueOf(input) {
    const raw = input.value.trim();
    const kind = input.dataset.kind;
    if (raw === "") return input.dataset.nullable ? null : undefined;
    if (kind === "int" || kind === "seconds") {
      const number = Number(raw);
      return Number.isFinite(number) ? number : raw;  // a non-number: the API names the field
    }
    if (kind === "json") {
      try { return JSON.parse(raw); } catch (err) { return raw; }
    }
    if (kind === "names") return raw.split(",").map(function (s) { return s.trim(); }).filter(Boolean);
    return raw;
  }

  function jobBody(form) {
    const editing = form.dataset.method === "PATCH";
    const body = {};
    form.querySelectorAll("[data-field]").forEach(function (input) {
      // an edit sends what was changed, so its plan and its audit entry hold just that
      if (editing && input.value === input.dataset.initial) return;
      const value = valueOf(input);
      if (value !== undefined) body[input.dataset.field] = value;
    });
    return body;
  }

  function setupJobForm(form) {
    const plan = form.querySelector("#plan");
    const lines = form.querySelector("#plan-lines");
    const save = form.querySelector("#save-button");
    let planned = null;

    function stale() {  // a change after the review: review again before saving
      planned = null;
      save.disabled = true;
      plan.hidden = true;
    }
    form.addEventListener("input", stale);
    form.addEventListener("change", stale);

    form.addEventListener("submit", async function (event) {
      event.preventDefault();
      const body = jobBody(form);
      const answer = await send(form, "POST", form.dataset.plan, body);
      if (!answer.ok) { showError(form, answer.body.error); stale(); return; }
      showError(form, null);
      lines.textContent = answer.body.lines.join("\n");
      plan.dataset.action = answer.body.action;
      plan.hidden = false;
      planned = body;
      save.disabled = answer.body.action === "unchanged";
      if (!save.disabled) save.focus();
    });

    save.addEventListener("click", async function () {
      if (planned === null) return;
      save.disabled = true;
      const answer = await send(form, form.dataset.method, form.dataset.save, planned);
      if (!answer.ok) { showError(form, answer.body.error); stale(); return; }
      window.location.assign("/ui/jobs/" + answer.body.id);
    });

    const schedule = form.querySelector('[data-field="schedule"]');
    const zone = form.querySelector('[data-field="timezone"]');
    const preview = form.querySelector("#schedule-preview");
    let timer = null;
    let asked = 0;

    function row(cells, tag) {
      const tr = document.createElement("tr");
      cells.forEach(function (text) {
        const cell = document.createElement(tag);
        cell.textContent = text;
        tr.appendChild(cell);
      });
      return tr;
    }

    async function showPreview() {
      const expression = schedule.value.trim();
      const tz = zone.value.trim() || "UTC";
      preview.textContent = "";
      if (!expression) return;
      const mine = ++asked;
      const url = "/ui/api/v1/schedule/next?" +
        new URLSearchParams({ schedule: expression, timezone: tz, count: "5" });
      const answer = await send(form, "GET", url);
      if (mine !== asked) return;  // a later keystroke's answer is the one to show
      if (!answer.ok) {
        const p = document.createElement("p");
        p.className = "err";
        p.dataset.testid = "preview-error";
        p.textContent = (answer.body.error && answer.body.error.message) || "refused";
        preview.appendChild(p);
        return;
      }
      const words = document.createElement("p");
      words.dataset.testid = "preview-words";
      words.textContent = answer.body.description;
      preview.appendChild(words);
      const table = document.createElement("table");
      table.dataset.testid = "preview-table";
      table.appendChild(row(["UTC", tz], "th"));
      answer.body.occurrences.forEach(function (o) {
        table.appendChild(row([o.utc.replace("T", " "), o.local.replace("T", " ")], "td"));
      });
      preview.appendChild(table);
      if (answer.body.ended) {
        const end = document.createElement("p");
        end.className = "sub";
        end.textContent = "no more occurrences: the schedule ends";
        preview.appendChild(end);
      }
    }

    function later() { window.clearTimeout(timer); timer = window.setTimeout(showPreview, 250); }
    schedule.addEventListener("input", later);
    zone.addEventListener("input", later);
    showPreview();
  }

  // -- the backfill form -------------------------------------------------------------------------

  function backfillBody(form, dryRun) {
    const only = Array.from(form.querySelectorAll('[name="only"]:checked')).map(function (c) { return c.value; });
    const max = form.querySelector('[name="max_concurrency"]').value.trim();
    const number = Number(max);
    return {
      from: form.querySelector('[name="from"]').value.trim(),
      to: form.querySelector('[name="to"]').value.trim(),
      only: only,
      max_concurrency: max === "" ? 1 : (Number.isFinite(number) ? number : max),
      newest_first: form.querySelector('[name="newest_first"]').checked,
      dry_run: dryRun,
    };
  }

  function setupBackfillForm(form) {
    const plan = form.querySelector("#plan");
    const rows = form.querySelector("#plan-rows");
    const summary = form.querySelector("#plan-summary");
    const title = form.querySelector("#plan-title");
    const run = form.querySelector("#backfill-button");

    function stale() { run.disabled = true; plan.hidden = true; }
    form.addEventListener("input", stale);
    form.addEventListener("change", stale);

    function show(body) {
      rows.textContent = "";
      const selected = body.occurrences.filter(function (o) { return o.selected; }).length;
      body.occurrences.forEach(function (o) {
        const tr = document.createElement("tr");
        [o.scheduled_for.replace("T", " "), o.status, o.selected ? "yes" : "no"].forEach(function (text) {
          const td = document.createElement("td");
          td.textContent = text;
          tr.appendChild(td);
        });
        if (!o.selected) tr.className = "sub";
        rows.appendChild(tr);
      });
      title.textContent = body.dry_run ? "Dry run: nothing written" : "Backfill queued";
      summary.textContent = body.dry_run
        ? selected + " of " + body.occurrences.length + " occurrences would run"
        : "batch " + body.batch_id + ": " + selected + " occurrences queued";
      plan.hidden = false;
      return selected;
    }

    form.addEventListener("submit", async function (event) {
      event.preventDefault();
      const answer = await send(form, "POST", form.dataset.url, backfillBody(form, true));
      if (!answer.ok) { showError(form, answer.body.error); stale(); return; }
      showError(form, null);
      run.disabled = show(answer.body) === 0;
    });

    run.addEventListener("click", async function () {
      run.disabled = true;
      const answer = await send(form, "POST", form.dataset.url, backfillBody(form, false));
      if (!answer.ok) { showError(form, answer.body.error); return; }
      showError(form, null);
      show(answer.body);
      const link = document.createElement("a");
      link.href = form.dataset.job;
      link.dataset.testid = "backfill-done";
      link.textContent = " see the job's runs";
      summary.appendChild(link);
    });
  }

  const jobForm = document.getElementById("job-form");
  if (jobForm) setupJobForm(jobForm);
  const backfillForm = document.getElementById("backfill-form");
  if (backfillForm) setupBackfillForm(backfillForm);
})();
