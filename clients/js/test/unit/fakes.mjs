// Fakes of fetch and WebSocket that record what the client sends and answer as told.

/** A JWT whose payload is `claims`, unsigned: the client only decodes it. */
export function jwt(claims) {
  const b64 = (o) => Buffer.from(JSON.stringify(o)).toString("base64url");
  return `${b64({ alg: "HS256", typ: "JWT" })}.${b64(claims)}.c2ln`;
}

/**
 * A fetch that answers each call with the next of `answers`: a Response, a function
 * of the request giving one, or an Error to throw (a network failure).
 */
export function fakeFetch(answers) {
  const calls = [];
  const fetch = async (url, init = {}) => {
    calls.push({ url, method: init.method, headers: init.headers, body: init.body === undefined ? undefined : JSON.parse(init.body) });
    const next = answers.shift();
    if (next === undefined) throw new Error(`unexpected request ${init.method} ${url}`);
    if (next instanceof Error) throw next;
    return typeof next === "function" ? next(url, init) : next;
  };
  return { fetch, calls };
}

export function json(status, body, headers = {}) {
  return new Response(JSON.stringify(body), { status, headers: { "Content-Type": "application/json", ...headers } });
}

/** A fetch that hands out tickets t1, t2, … for every POST /v1/watch/tickets. */
export function ticketFetch() {
  let n = 0;
  const calls = [];
  const fetch = async (url, init = {}) => {
    calls.push({ url, method: init.method, headers: init.headers });
    if (!url.endsWith("/v1/watch/tickets")) throw new Error(`unexpected request ${url}`);
    n++;
    return json(200, { ticket: `t${n}`, expiresAt: "2026-11-22T07:20:31Z" });
  };
  return { fetch, calls };
}

/** A WebSocket whose every instance is kept, for the test to open, feed and drop. */
export class FakeWebSocket {
  static instances = [];
  readyState = 0;
  sent = [];
  closed = undefined;
  onopen = null;
  onmessage = null;
  onclose = null;
  onerror = null;

  constructor(url) {
    this.url = new URL(url);
    FakeWebSocket.instances.push(this);
  }
  send(data) {
    if (this.readyState !== 1) throw new Error("send on a socket that is not open");
    this.sent.push(JSON.parse(data));
  }
  close(code, reason) {
    this.closed = { code, reason };
    this.readyState = 3;
  }
  // The test's side.
  open() {
    this.readyState = 1;
    this.onopen?.({});
  }
  message(msg) {
    this.onmessage?.({ data: JSON.stringify(msg) });
  }
  drop(code = 1006) {
    this.readyState = 3;
    this.onclose?.({ code, reason: "" });
  }
  static reset() {
    FakeWebSocket.instances = [];
  }
  static last() {
    return FakeWebSocket.instances.at(-1);
  }
}

/** Resolves once `cond()` is true, polling the event loop; fails after 2 s. */
export async function until(cond, what) {
  const deadline = Date.now() + 2000;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 1));
  }
}
