import assert from "node:assert/strict";
import { test } from "node:test";

import { PulseClient, PulseError, backoffMs, retryAfterMs, subjectOf } from "../../dist/index.js";
import { fakeFetch, json, jwt } from "./fakes.mjs";

const accepted = (ids) => json(202, { accepted: ids.length, eventIds: ids });

function client(answers, extra = {}) {
  const f = fakeFetch(answers);
  const sleeps = [];
  const c = new PulseClient({
    ingestUrl: "http://ingest.test/",
    queryUrl: "http://query.test",
    deviceId: "phone",
    token: () => jwt({ sub: "bob", exp: 2e9 }),
    fetch: f.fetch,
    sleep: async (ms) => void sleeps.push(ms),
    random: () => 0.5,
    ...extra,
  });
  return { c, calls: f.calls, sleeps };
}

test("setStatus posts one status event for the token's user and this device", async () => {
  const { c, calls } = client([accepted(["x"])]);
  const id = await c.setStatus("online");
  assert.equal(calls.length, 1);
  assert.equal(calls[0].url, "http://ingest.test/v1/events");
  assert.equal(calls[0].method, "POST");
  assert.equal(calls[0].headers.Authorization, `Bearer ${jwt({ sub: "bob", exp: 2e9 })}`);
  assert.equal(calls[0].headers["Content-Type"], "application/json");
  assert.deepEqual(calls[0].body, { events: [{ eventId: id, userId: "bob", deviceId: "phone", kind: "status", status: "online" }] });
  assert.match(id, /^[0-9a-f-]{36}$/);
});

test("heartbeat, activity and setInvisible send their kinds", async () => {
  const { c, calls } = client([accepted(["1"]), accepted(["2"]), accepted(["3"])]);
  await c.heartbeat();
  await c.activity();
  await c.setInvisible();
  assert.deepEqual(
    calls.map((k) => [k.body.events[0].kind, k.body.events[0].status]),
    [["heartbeat", undefined], ["activity", undefined], ["status", "invisible"]],
  );
});

test("429 and 503 are retried after their Retry-After, with the same eventId", async () => {
  const { c, calls, sleeps } = client([
    json(429, { error: { code: "rate_limited", message: "slow down" } }, { "Retry-After": "2" }),
    json(503, { error: { code: "unavailable", message: "kafka" } }, { "Retry-After": "1" }),
    accepted(["x"]),
  ]);
  const id = await c.setStatus("idle");
  assert.deepEqual(sleeps, [2000, 1000]);
  assert.equal(calls.length, 3);
  assert.deepEqual(
    calls.map((k) => k.body.events[0].eventId),
    [id, id, id],
  );
});

test("without Retry-After, network errors and 5xx back off exponentially with jitter", async () => {
  const { c, calls, sleeps } = client(
    [new TypeError("fetch failed"), json(503, { error: { code: "unavailable", message: "x" } }), json(502, "bad gateway"), accepted(["x"])],
    { retry: { baseDelayMs: 100 } },
  );
  await c.heartbeat();
  // random() = 0.5 of ceilings 100, 200, 400
  assert.deepEqual(sleeps, [50, 100, 200]);
  assert.equal(new Set(calls.map((k) => k.body.events[0].eventId)).size, 1);
});

test("attempts are bounded; the last error is thrown", async () => {
  const unavailable = () => json(503, { error: { code: "unavailable", message: "kafka is down" } });
  const { c, calls } = client([unavailable(), unavailable(), unavailable()], { retry: { maxAttempts: 3 } });
  await assert.rejects(c.activity(), (err) => err instanceof PulseError && err.status === 503 && err.code === "unavailable" && err.message === "kafka is down");
  assert.equal(calls.length, 3);
});

test("a Retry-After past maxDelayMs is not waited for", async () => {
  const { c, calls, sleeps } = client([json(429, { error: { code: "rate_limited", message: "later" } }, { "Retry-After": "120" })]);
  await assert.rejects(c.activity(), (err) => err instanceof PulseError && err.status === 429 && err.retryAfterMs === 120_000);
  assert.equal(calls.length, 1);
  assert.deepEqual(sleeps, []);
});

test("other 4xx throw a PulseError from the body at once", async () => {
  const { c, calls } = client([
    json(400, { error: { code: "invalid_request", message: "must not be empty", field: "events[0].deviceId" } }),
  ]);
  await assert.rejects(c.setStatus("online"), (err) => {
    assert.ok(err instanceof PulseError);
    assert.equal(err.status, 400);
    assert.equal(err.code, "invalid_request");
    assert.equal(err.message, "must not be empty");
    assert.equal(err.field, "events[0].deviceId");
    return true;
  });
  assert.equal(calls.length, 1);
});

test("a body that is not Pulse's error shape still gives a PulseError", async () => {
  const { c } = client([new Response("<html>nope</html>", { status: 403 })]);
  await assert.rejects(c.heartbeat(), (err) => err instanceof PulseError && err.status === 403 && err.code === "http_403");
});

test("lastSeen posts the ids to /v1/statuses and returns the full statuses", async () => {
  const statuses = [
    { userId: "bob", status: "online", lastUpdated: "2026-11-22T07:20:00.5Z", lastActive: "2026-11-22T07:20:00.5Z", lastSeen: "2026-11-22T07:21:10Z" },
    { userId: "carol", status: "offline", lastUpdated: null, lastActive: null, lastSeen: null },
  ];
  const { c, calls } = client([json(200, { statuses })]);
  assert.deepEqual(await c.lastSeen(["bob", "carol"]), statuses);
  assert.equal(calls[0].url, "http://query.test/v1/statuses");
  assert.equal(calls[0].method, "POST");
  assert.deepEqual(calls[0].body, { userIds: ["bob", "carol"] });
});

test("userId given explicitly wins over the token (an opaque API key has no sub)", async () => {
  const { c, calls } = client([accepted(["x"])], { token: "pulse_key", userId: "dave" });
  await c.heartbeat();
  assert.equal(calls[0].body.events[0].userId, "dave");
  assert.equal(calls[0].headers.Authorization, "Bearer pulse_key");
});

test("subjectOf decodes the payload's sub, base64url and UTF-8 included", () => {
  assert.equal(subjectOf(jwt({ sub: "zoë/ü?~", exp: 1 })), "zoë/ü?~");
  assert.throws(() => subjectOf("pulse_abc"), /not a JWT/);
  assert.throws(() => subjectOf(jwt({ exp: 1 })), /no sub claim/);
  assert.throws(() => subjectOf("a.%%%.c"), /base64url/);
});

test("retryAfterMs reads seconds and HTTP dates", () => {
  assert.equal(retryAfterMs("5"), 5000);
  assert.equal(retryAfterMs(null), undefined);
  assert.equal(retryAfterMs("soon"), undefined);
  const now = Date.parse("2026-11-22T07:20:00Z");
  assert.equal(retryAfterMs("Sun, 22 Nov 2026 07:20:03 GMT", now), 3000);
});

test("backoffMs is a uniform draw below a doubling ceiling, capped", () => {
  const r = { baseDelayMs: 100, maxDelayMs: 1000, random: () => 0.999 };
  assert.deepEqual([0, 1, 2, 3, 4, 40].map((a) => backoffMs(r, a)), [99, 199, 399, 799, 999, 999]);
  assert.equal(backoffMs({ ...r, random: () => 0 }, 3), 0);
});
