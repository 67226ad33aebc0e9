// Commonplace's service worker, its second half (sw.js imports it; they share one scope):
// a new entry or an edit posted while the server is unreachable is kept in IndexedDB with
// its base revision and the login it was written as, and sent through /api/v1 when a page
// asks (on load, on the browser's "online" event, and again while writes wait), only as
// the login that wrote it.
"use strict";

const WRITE_FORMS = /^\/entries\/(?:new|(\d+)\/edit)$/;

function today() {
  const now = new Date();
  const pad = (n) => String(n).padStart(2, "0");
  return `${now.getFullYear()}-${pad(now.getMonth() + 1)}-${pad(now.getDate())}`;
}

async function keepWrite(path, form) {
  const match = WRITE_FORMS.exec(path);
  const fields = {};
  for (const name of ["date", "title", "tags", "status", "body"]) {
    if (form.has(name)) fields[name] = String(form.get(name)).replace(/\r\n/g, "\n");
  }
  const edit = Boolean(match[1]);
  if (edit || form.has("status")) fields.publish = form.has("publish");
  // A capture is of the day it was written, not the day it reaches the server.
  if (!edit && !fields.date) fields.date = today();
  const record = {
    key: crypto.randomUUID(), login: (await getMeta("login")) || "", made_at: Date.now(),
    kind: edit ? "edit" : "create", entry_id: edit ? Number(match[1]) : null,
    base_revision: edit ? Number(form.get("base_revision")) : null, fields,
    state: "pending", message: "",
  };
  await put("pending", record);
  return record;
}

async function write(request) {
  const copy = request.clone();
  try {
    const response = await fetch(request);
    wroteAt = Date.now();
    return response;
  } catch (error) {
    const record = await keepWrite(new URL(request.url).pathname, await copy.formData());
    tellPages({ type: "changed" });
    return Response.redirect(new URL(`/offline?kept=${record.key}`, self.location).href, 303);
  }
}

function sendOne(record) {
  const headers = { "Content-Type": "application/json", Accept: "application/json" };
  if (record.kind === "create") {
    // The key makes a resend after a lost answer the same capture, never a second one.
    headers["Idempotency-Key"] = `offline:${record.key}`;
    return fetch("/api/v1/entries", { method: "POST", headers, credentials: "same-origin",
                                      body: JSON.stringify(record.fields) });
  }
  return fetch(`/api/v1/entries/${record.entry_id}`, {
    method: "PUT", headers, credentials: "same-origin",
    body: JSON.stringify({ ...record.fields, base_revision: record.base_revision }),
  });
}

let flushing = null;

function flush() {
  if (!flushing) flushing = flushPending().finally(() => { flushing = null; });
  return flushing;
}

// Authorization is checked when the writes go, not when they were made: /api/v1/me names
// who the server takes this device for now (there is no token to keep: cross-site writes
// are refused by Sec-Fetch-Site, which the browser sets on each request as it is sent).
async function flushPending() {
  // Every login's waiting writes count here: the server decides whose turn it is.
  const waiting = (await getAll("pending")).filter((r) => r.state === "pending");
  if (!waiting.length) return;
  const identity = await checkSignedIn();
  if (!identity || !identity.can_write) return;
  let sent = 0;
  for (const record of waiting.sort((a, b) => a.made_at - b.made_at)) {
    if (record.login !== identity.login) continue;  // another login's words wait for it
    const response = await sendOne(record);
    if (response.ok) {
      await remove("pending", record.key);
      sent += 1;
      continue;
    }
    if (response.status >= 500 || response.status === 429) break;  // try again later
    const answer = await response.json().catch(() => ({}));
    record.message = (answer.error && answer.error.message) || `refused (${response.status})`;
    // A conflict goes to the merge view; anything else stays, its text shown, for the owner.
    record.state = response.status === 409 ? "conflict" : "refused";
    await put("pending", record);
  }
  tellPages({ type: "changed" });
  if (sent) await refresh();
}
