// Commonplace's service worker: the notebook readable without the tailnet, and writes made
// meanwhile kept on the device until it is back. Served at /sw.js so its scope is the whole
// origin. Plain script, no build step; docs/ARCHITECTURE.md ("Offline") has the design.
//
//  - pages: from the network while it answers in time (see patience()), else the copy
//    kept here (the network's answer still refreshes it); a page never kept shows
//    /offline. Not stale-while-revalidate: a page opened after a save must show the save.
//  - what the pages load (stylesheets, scripts, icons, images): kept on first use; one
//    whose URL names its content (fingerprinted()) is never fetched again.
//  - the offline set (/offline/pages.json: this week's letter and the ones before, recent
//    entries, the site map), with the assets each page references: fetched when a page
//    opens and finds the copy older than REFRESH_MS.
//  - a new entry or an edit posted while the server is unreachable: offline-writes.js.
"use strict";

const PAGES = "commonplace-pages-v1";
const ASSETS = "commonplace-assets-v1";
const REFRESH_MS = 10 * 60 * 1000;
const ASSET_TAGS = /<(link|script|img)\b[^>]*>/gi;
const KEPT_RELS = /\b(stylesheet|icon|apple-touch-icon|manifest|preload)\b/i;
// Not audio or video: those come in ranges (206), which the Cache API refuses to keep.
const KEPT_DESTINATIONS = new Set(["style", "script", "image", "font", "manifest"]);

// The writes kept while offline, and their sending (keepWrite, write, flush): same scope.
importScripts("/static/offline-writes.js");

// -- IndexedDB: the pending writes, what is kept and when, whose it is -------------------

function openStore() {
  return new Promise((resolve, reject) => {
    const request = indexedDB.open("commonplace-offline", 1);
    request.onupgradeneeded = () => {
      const db = request.result;
      db.createObjectStore("pending", { keyPath: "key" });
      db.createObjectStore("kept", { keyPath: "url" });
      db.createObjectStore("meta");
    };
    request.onsuccess = () => resolve(request.result);
    request.onerror = () => reject(request.error);
  });
}

async function store(name, mode, work) {
  const db = await openStore();
  return new Promise((resolve, reject) => {
    const tx = db.transaction(name, mode);
    const request = work(tx.objectStore(name));
    tx.oncomplete = () => { db.close(); resolve(request && request.result); };
    tx.onerror = () => { db.close(); reject(tx.error); };
  });
}

const getAll = (name) => store(name, "readonly", (s) => s.getAll());
const put = (name, value, key) => store(name, "readwrite", (s) => s.put(value, key));
const remove = (name, key) => store(name, "readwrite", (s) => s.delete(key));
const getMeta = (key) => store("meta", "readonly", (s) => s.get(key));

// -- whose copy this is -------------------------------------------------------------------

// Everything kept for reading belongs to the login that could read it: a viewer must not
// be shown an owner's drafts from the cache, nor anyone the copy once signed out. Pending
// writes stay (they are someone's words), tagged with their login and sent only as it.
async function forgetReadingCopy() {
  await caches.delete(PAGES);
  await caches.delete(ASSETS);
  await store("kept", "readwrite", (s) => s.clear());
  await put("meta", 0, "refreshed_at");
}

async function noteLogin(login) {
  if (!login) return;
  const known = await getMeta("login");
  if (known && known !== login) await forgetReadingCopy();
  if (known !== login) await put("meta", login, "login");
}

async function signedOut() {
  await forgetReadingCopy();
  await remove("meta", "login");
}

// A refused page may only be one this login may not open (a viewer at an owner's form):
// the server's own word on who this device is decides whether it signed out.
let reachable = null;  // whether the server answered the last time a flush asked it

async function checkSignedIn() {
  let me;
  try {
    me = await fetch("/api/v1/me", { credentials: "same-origin", cache: "no-store" });
    reachable = true;
  } catch (error) {
    reachable = false;
    throw error;
  }
  if (me.status === 401 || me.status === 403) {
    await signedOut();
    return null;
  }
  if (!me.ok) return null;
  const identity = await me.json();
  await noteLogin(identity.login);
  return identity;
}

// -- pages and assets ---------------------------------------------------------------------

function isHtml(response) {
  return (response.headers.get("Content-Type") || "").startsWith("text/html");
}

function keepable(response) {
  return response.ok && response.type === "basic" && !response.redirected;
}

function titleOf(html) {
  const match = /<title>([^<]*)<\/title>/i.exec(html);
  const text = match ? match[1].replace(/ · Commonplace$/, "") : "";
  return text.replace(/&amp;/g, "&").replace(/&#39;/g, "'").replace(/&quot;/g, '"')
    .replace(/&lt;/g, "<").replace(/&gt;/g, ">");
}

// What a page loads, read from its HTML: so whatever URLs the templates give the
// stylesheets and scripts (hashed, renamed), the copy kept is the one the page asks for.
function assetsOf(html, base) {
  const found = new Set();
  for (const match of html.matchAll(ASSET_TAGS)) {
    const tag = match[0];
    if (match[1].toLowerCase() === "link" && !KEPT_RELS.test(/\brel="([^"]*)"/i.exec(tag)?.[1] || "")) {
      continue;
    }
    const src = /\b(?:href|src)="([^"]+)"/i.exec(tag);
    if (!src) continue;
    const url = new URL(src[1].replace(/&amp;/g, "&"), base);
    if (url.origin === self.location.origin) found.add(url.href);
  }
  return found;
}

async function keepPage(url, response) {
  const html = await response.clone().text();
  const cache = await caches.open(PAGES);
  await cache.put(url, response);
  await put("kept", { url, title: titleOf(html), at: Date.now() });
  return assetsOf(html, url);
}

async function keepAssets(urls) {
  const cache = await caches.open(ASSETS);
  for (const url of urls) {
    if (await cache.match(url)) continue;
    try {
      const response = await fetch(url, { credentials: "same-origin" });
      if (keepable(response)) await cache.put(url, response);
    } catch (error) {
      return;  // offline again: the next refresh finishes the job
    }
  }
}

const servedKept = new Map();  // page URL -> when its kept copy was made (this worker's life)

// How long a page may take before the kept copy is shown instead: short once the link has
// shown itself weak (a failure or a slow answer in the last minute), longer before that;
// never right after a write, whose next page must show it.
const WEAK_WAIT_MS = 3000;
const FIRST_WAIT_MS = 10000;
const WEAK_FOR_MS = 60000;
const AFTER_WRITE_MS = 30000;
let weakUntil = 0;
let wroteAt = 0;

function patience() {
  if (Date.now() - wroteAt < AFTER_WRITE_MS) return null;
  return Date.now() < weakUntil ? WEAK_WAIT_MS : FIRST_WAIT_MS;
}

async function page(request) {
  const url = request.url;
  const wait = patience();
  const network = fetch(request).then(async (response) => {
    if (response.status === 401 || response.status === 403) {
      await checkSignedIn();
    } else if (keepable(response) && isHtml(response)) {
      servedKept.delete(url);
      keepPage(url, response.clone()).then(keepAssets).catch(() => {});
    }
    return response;
  }, (error) => {
    weakUntil = Date.now() + WEAK_FOR_MS;
    throw error;
  });
  network.catch(() => {});  // answered from the copy, a late failure is nobody's business
  let failed = false;
  try {
    const slow = new Promise((resolve) => { if (wait !== null) setTimeout(resolve, wait, null); });
    const first = await Promise.race([network, slow]);
    if (first) return first;
    weakUntil = Date.now() + WEAK_FOR_MS;
  } catch (error) {
    failed = true;
  }
  const kept = await caches.match(url, { cacheName: PAGES });
  if (kept) {
    const record = await store("kept", "readonly", (s) => s.get(url));
    servedKept.set(url, record ? record.at : 0);
    return kept;
  }
  if (!failed) {
    try { return await network; } catch (error) { /* fall through to the offline page */ }
  }
  const offline = await caches.match(new URL("/offline", self.location).href,
                                     { cacheName: PAGES });
  return offline || new Response("Offline, and this page is not kept on this device.",
                                 { status: 503, headers: { "Content-Type": "text/plain" } });
}

// A URL that names its content (a ?v= hash, an attachment's sha256, a static file, which
// the templates always give a hash) is kept as it is; anything else a page loads is shown
// from the copy and fetched again behind it.
function fingerprinted(url) {
  return url.searchParams.has("v") || url.pathname.startsWith("/static/") ||
    url.pathname.startsWith("/attachments/");
}

async function asset(request) {
  const cache = await caches.open(ASSETS);
  const kept = await cache.match(request);
  if (kept && fingerprinted(new URL(request.url))) return kept;
  const fresh = fetch(request).then(async (response) => {
    if (keepable(response)) await cache.put(request, response.clone());
    return response;
  });
  if (!kept) return fresh;
  fresh.catch(() => {});  // offline: the copy is the answer
  return kept;
}

// -- the offline set ------------------------------------------------------------------------

let refreshing = null;

function refresh() {
  if (!refreshing) refreshing = refreshSet().finally(() => { refreshing = null; });
  return refreshing;
}

async function refreshSet() {
  const answer = await fetch("/offline/pages.json", { credentials: "same-origin",
                                                      cache: "no-store" });
  if (answer.status === 401 || answer.status === 403) return signedOut();
  if (!answer.ok) return;
  const listing = await answer.json();
  await noteLogin(listing.login);
  const wanted = new Set(listing.pages.map((path) => new URL(path, self.location).href));
  const assets = new Set();
  for (const url of wanted) {
    const response = await fetch(url, { credentials: "same-origin", cache: "no-cache" });
    if (!keepable(response) || !isHtml(response)) continue;
    for (const each of await keepPage(url, response)) assets.add(each);
  }
  await keepAssets(assets);
  // Pages and assets no longer listed go: the copy stays the size of the offline set.
  const cache = await caches.open(PAGES);
  for (const request of await cache.keys()) {
    if (!wanted.has(request.url)) {
      await cache.delete(request);
      await remove("kept", request.url);
    }
  }
  const assetCache = await caches.open(ASSETS);
  for (const request of await assetCache.keys()) {
    if (!assets.has(request.url)) await assetCache.delete(request);
  }
  await put("meta", Date.now(), "refreshed_at");
  tellPages({ type: "changed" });
}

// -- what pages ask -------------------------------------------------------------------------

async function tellPages(message) {
  for (const client of await self.clients.matchAll({ type: "window" })) {
    client.postMessage(message);
  }
}

async function status(url) {
  const kept = await getAll("kept");
  const login = await getMeta("login");
  const pending = (await getAll("pending"));
  return {
    login, refreshed_at: (await getMeta("refreshed_at")) || 0,
    kept: kept.map(({ url: u, title, at }) => ({ url: u, title, at })),
    this_page: servedKept.has(url) ? servedKept.get(url) : null,
    pending: pending.filter((r) => r.login === login),
    others: pending.filter((r) => r.login !== login).length, reachable,
  };
}

async function answer(data) {
  switch (data.type) {
    case "hello": {  // a page opened: whose it is, and the set refreshed if it is old
      await noteLogin(data.login);
      const refreshed = (await getMeta("refreshed_at")) || 0;
      if (data.online && Date.now() - refreshed > REFRESH_MS) refresh().catch(() => {});
      if (data.online) await flush().catch(() => {});
      return status(data.url);
    }
    case "flush":
      await flush().catch(() => {});
      return status(data.url);
    case "status":
      return status(data.url);
    case "forget":
      await forgetReadingCopy();
      return status(data.url);
    case "discard":  // the owner has the text elsewhere now (the merge view saved it)
      await remove("pending", data.key);
      tellPages({ type: "changed" });
      return status(data.url);
    default:
      return { error: "unknown request" };
  }
}

self.addEventListener("message", (event) => {
  const port = event.ports[0];
  event.waitUntil(answer(event.data || {}).then(
    (reply) => port && port.postMessage(reply),
    (error) => port && port.postMessage({ error: String(error) }),
  ));
});

// -- lifecycle and routing ------------------------------------------------------------------

self.addEventListener("install", (event) => {
  event.waitUntil(self.skipWaiting());
});

self.addEventListener("activate", (event) => {
  // The offline set is fetched when a page says hello, not here: pages wait for an
  // activating worker, and the set is dozens of fetches.
  event.waitUntil(self.clients.claim());
});

self.addEventListener("fetch", (event) => {
  const request = event.request;
  const url = new URL(request.url);
  if (url.origin !== self.location.origin) return;
  if (request.method === "POST" && request.mode === "navigate" && WRITE_FORMS.test(url.pathname)) {
    event.respondWith(write(request));
    return;
  }
  if (request.method !== "GET" || url.pathname.startsWith("/api/") || url.pathname === "/sw.js") {
    return;
  }
  if (request.mode === "navigate") {
    event.respondWith(page(request));
  } else if (KEPT_DESTINATIONS.has(request.destination)) {
    event.respondWith(asset(request));
  }
});
