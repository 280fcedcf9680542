// Every request the console makes goes through here: the user's bearer token on each call
// (never in a URL), API.md's error body turned into an ApiError carrying the server's own
// message, and conditional GETs (ETag) for what is polled.

const ROOT = new URL("../", document.baseURI); // the controller's root, seen from /console/
export const TOKEN_KEY = "c4.console.token";

export class ApiError extends Error {
  constructor(status, code, message, details) {
    super(message);
    this.status = status;
    this.code = code;
    this.details = details || {};
  }
}

export function apiUrl(path) {
  return new URL(path.replace(/^\//, ""), ROOT).toString();
}

export function encodeName(name) {
  return encodeURIComponent(name);
}

async function errorOf(res) {
  let body = null;
  try { body = await res.json(); } catch (_) { /* not JSON */ }
  const e = body && body.error;
  if (e) return new ApiError(res.status, e.code, e.message, e.details);
  return new ApiError(res.status, "http_" + res.status, `${res.status} ${res.statusText}`);
}

// A client bound to one token. `onUnauthorized` runs when the server stops accepting it.
export function makeClient(token, onUnauthorized) {
  const kept = new Map(); // path -> [etag, value]
  // Requests boot.js started for this token, each taken once by the first GET of its path.
  const early = window.c4Early && window.c4Early.token === token ? window.c4Early.early : {};

  async function call(method, path, body, conditional) {
    const headers = { Authorization: `Bearer ${token}`, Accept: "application/json" };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const held = conditional ? kept.get(path) : undefined;
    if (held) headers["If-None-Match"] = held[0];
    let res;
    const started = method === "GET" ? early[path] : undefined;
    delete early[path];
    try {
      res = started ? await started : await fetch(apiUrl(path), {
        method, headers, cache: "no-store",
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    } catch (err) {
      throw new ApiError(0, "unreachable", `controller unreachable (${err.message})`);
    }
    if (res.status === 304 && held) return { value: held[1], changed: false };
    if (!res.ok) {
      const err = await errorOf(res);
      if (res.status === 401 && onUnauthorized) onUnauthorized(err.message);
      throw err;
    }
    const value = res.status === 204 ? null : await res.json();
    const etag = res.headers.get("ETag");
    if (conditional && etag) kept.set(path, [etag, value]);
    return { value, changed: true };
  }

  return {
    get: async (path) => (await call("GET", path)).value,
    // { value, changed }: `changed` is false when the server answered 304.
    poll: (path) => call("GET", path, undefined, true),
    post: async (path, body) => (await call("POST", path, body === undefined ? {} : body)).value,
    patch: async (path, body) => (await call("PATCH", path, body)).value,
  };
}

// Who a token is, without keeping it anywhere: used by the login form.
export async function whoAmI(token) {
  return makeClient(token).get("/console/api/session");
}
