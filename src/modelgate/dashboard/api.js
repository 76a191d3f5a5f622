// The admin API client. The token lives in sessionStorage (this tab only) and goes to /admin/api
// as Authorization: Bearer, never in a URL; the browser caches no response. Without a token, a person
// signed in with single sign-on is authenticated by the HttpOnly session cookie, and every write
// carries the session's CSRF token (from GET /admin/api/sso/session) as X-CSRF-Token. A report
// answered with an ETag is asked for again with If-None-Match (a 304 reuses the last answer).

const TOKEN_KEY = "modelgate.adminToken";
const API = "/admin/api";

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export const token = {
  get: () => sessionStorage.getItem(TOKEN_KEY),
  set: (value) => sessionStorage.setItem(TOKEN_KEY, value),
  clear: () => sessionStorage.removeItem(TOKEN_KEY),
};

// The signed-in session's CSRF token (null: no session, or an admin token is used).
const signedIn = { csrf: null };

// The last answer of each GET that carried an ETag (the usage reports), in this tab's memory only
// and dropped on sign-out: its tag goes back as If-None-Match, and a 304 (nothing changed) reuses
// the text instead of the server encoding and sending the same report again. At most
// REMEMBERED answers are kept, the least recently used dropped first.
const REMEMBERED = 32;
const remembered = new Map();

export function forget() {
  remembered.clear();
}

async function call(method, path, body, ifNoneMatch) {
  const bearer = token.get();
  const headers = bearer ? { Authorization: "Bearer " + bearer } : {};
  if (ifNoneMatch) headers["If-None-Match"] = ifNoneMatch;
  if (!bearer && signedIn.csrf && method !== "GET" && method !== "HEAD") headers["X-CSRF-Token"] = signedIn.csrf;
  const credentials = bearer ? "omit" : "same-origin";
  const init = { method, headers, cache: "no-store", credentials, redirect: "error" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const res = await fetch(API + path, init);
  if (res.status === 304 && ifNoneMatch) return res;
  if (!res.ok) {
    const data = await res.json().catch(() => null);
    throw new ApiError(res.status, data && data.error ? data.error.message : "HTTP " + res.status);
  }
  return res;
}

export async function api(method, path, body) {
  if (method !== "GET") return (await call(method, path, body)).json();
  const known = remembered.get(path);
  const res = await call(method, path, undefined, known && known.etag);
  remembered.delete(path);
  if (res.status === 304) {
    remembered.set(path, known);
    return JSON.parse(known.text);
  }
  const text = await res.text();
  const etag = res.headers.get("ETag");
  if (etag) {
    remembered.set(path, { etag, text });
    if (remembered.size > REMEMBERED) remembered.delete(remembered.keys().next().value);
  }
  return JSON.parse(text);
}

export function query(params) {
  const q = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) {
    if (value !== null && value !== undefined && value !== "") q.set(name, String(value));
  }
  const text = q.toString();
  return text ? "?" + text : "";
}

// A file the server sends (CSV): fetched with the token, handed to the browser as a download.
export async function download(path, fallbackName) {
  const res = await call("GET", path);
  const disposition = res.headers.get("content-disposition") || "";
  const match = /filename="([^"]+)"/.exec(disposition);
  const url = URL.createObjectURL(await res.blob());
  const link = document.createElement("a");
  link.href = url;
  link.download = match ? match[1] : fallbackName;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
  return link.download;
}

// Single sign-on: whether it is offered, the session behind the cookie (null when none), sign-out.
export async function ssoStatus() {
  const res = await fetch(API + "/sso", { cache: "no-store", credentials: "omit" });
  return res.ok ? res.json() : { enabled: false, login_url: null };
}

export async function ssoSession() {
  if (token.get()) return null;
  try {
    const found = await api("GET", "/sso/session");
    signedIn.csrf = found.csrf_token;
    return found;
  } catch (err) {
    if (err instanceof ApiError && (err.status === 401 || err.status === 404)) return null;
    throw err;
  }
}

export async function ssoSignOut() {
  if (!signedIn.csrf) return;
  try {
    await call("POST", "/sso/logout");
  } finally {
    signedIn.csrf = null;
  }
}
