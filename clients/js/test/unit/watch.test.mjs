import assert from "node:assert/strict";
import { beforeEach, test } from "node:test";

import { PulseClient, PulseError, micros } from "../../dist/index.js";
import { FakeWebSocket, jwt, ticketFetch, until } from "./fakes.mjs";

const token = jwt({ sub: "alice", exp: 2e9 });

function setup() {
  const f = ticketFetch();
  const c = new PulseClient({
    ingestUrl: "http://ingest.test",
    queryUrl: "https://query.test/pulse/",
    deviceId: "tab-1",
    token,
    fetch: f.fetch,
    WebSocket: FakeWebSocket,
    sleep: async () => {},
  });
  return { c, ticketCalls: f.calls };
}

/** Records a watch's events in order, as [type, payload]. */
function record(w) {
  const seen = [];
  for (const type of ["snapshot", "change", "error", "open", "reconnecting", "close"]) w.on(type, (p) => seen.push([type, p]));
  return seen;
}

const change = (userId, status, previous, at, cursor) => ({ type: "change", userId, status, previous, at, cause: "event", cursor });

beforeEach(() => FakeWebSocket.reset());

test("a watch asks for a ticket with the token in the header, then opens the feed with it", async () => {
  const { c, ticketCalls } = setup();
  const w = c.watch(["bob", "carol"]);
  await until(() => FakeWebSocket.instances.length === 1, "the socket");
  assert.equal(ticketCalls.length, 1);
  assert.equal(ticketCalls[0].url, "https://query.test/pulse/v1/watch/tickets");
  assert.equal(ticketCalls[0].method, "POST");
  assert.equal(ticketCalls[0].headers.Authorization, `Bearer ${token}`);
  const u = FakeWebSocket.last().url;
  assert.equal(`${u.origin}${u.pathname}`, "wss://query.test/pulse/v1/watch");
  assert.deepEqual([...u.searchParams], [["userIds", "bob,carol"], ["ticket", "t1"]]);
  w.close();
});

test("snapshot and changes keep the statuses map; a change not later than lastUpdated is dropped", async () => {
  const { c } = setup();
  const w = c.watch(["bob", "carol"]);
  const seen = record(w);
  await until(() => FakeWebSocket.instances.length === 1, "the socket");
  const ws = FakeWebSocket.last();
  ws.open();
  ws.message({
    type: "snapshot",
    statuses: [
      { userId: "bob", status: "online", lastUpdated: "2026-11-22T07:20:01.123456Z", lastActive: "2026-11-22T07:20:01.1Z", lastSeen: "2026-11-22T07:20:30Z" },
      { userId: "carol", status: "offline", lastUpdated: null, lastActive: null, lastSeen: null },
    ],
    cursor: "c0",
  });
  // Already reflected by the snapshot: same instant, and a microsecond earlier.
  ws.message(change("bob", "online", "offline", "2026-11-22T07:20:01.123456Z", "c1"));
  ws.message(change("bob", "online", "offline", "2026-11-22T07:20:01.123455Z", "c2"));
  ws.message(change("bob", "idle", "online", "2026-11-22T07:20:01.123457Z", "c3"));
  ws.message(change("carol", "online", "offline", "2026-11-22T07:21:00Z", "c4"));
  assert.deepEqual(
    seen.filter(([t]) => t === "change").map(([, p]) => [p.userId, p.status, p.cursor]),
    [["bob", "idle", "c3"], ["carol", "online", "c4"]],
  );
  assert.deepEqual(Object.fromEntries(w.statuses), {
    bob: { status: "idle", lastUpdated: "2026-11-22T07:20:01.123457Z", lastActive: "2026-11-22T07:20:01.1Z", lastSeen: "2026-11-22T07:20:30Z", data: null, dataAt: "2026-11-22T07:20:01.123457Z" },
    carol: { status: "online", lastUpdated: "2026-11-22T07:21:00Z", lastActive: null, lastSeen: null, data: null, dataAt: "2026-11-22T07:21:00Z" },
  });
  assert.equal(w.cursor, "c4", "a dropped change still moves the cursor");
  w.close();
});

test("custom status: snapshots and changes carry it; a change of it alone leaves lastUpdated", async () => {
  const { c } = setup();
  const w = c.watch(["bob"]);
  const seen = record(w);
  await until(() => FakeWebSocket.instances.length === 1, "the socket");
  const ws = FakeWebSocket.last();
  ws.open();
  const lunch = { text: "lunch", emoji: "🥪" };
  ws.message({
    type: "snapshot",
    statuses: [{ userId: "bob", status: "online", lastUpdated: "2026-11-22T07:20:00Z", lastActive: "2026-11-22T07:20:05Z", lastSeen: "2026-11-22T07:20:30Z", data: lunch }],
    cursor: "c0",
  });
  const data = (status, at, d, cursor, cause = "event") => ({ ...change("bob", status, status, at, cursor), cause, data: d });
  // Set by the status event the snapshot's lastActive already reflects: not news.
  ws.message(data("online", "2026-11-22T07:20:05Z", lunch, "c1"));
  // A new one, then its until: changes of the custom status alone.
  const meeting = { text: "In a meeting", emoji: "📅", until: "2026-11-22T08:00:00Z" };
  ws.message(data("online", "2026-11-22T07:30:00Z", meeting, "c2"));
  ws.message(data("online", "2026-11-22T08:00:00Z", null, "c3", "timeout"));
  // A status change carries the custom status as it is then.
  ws.message({ ...change("bob", "idle", "online", "2026-11-22T08:05:00Z", "c4"), data: null });
  assert.deepEqual(
    seen.filter(([t]) => t === "change").map(([, p]) => [p.cursor, p.status, p.data]),
    [["c2", "online", meeting], ["c3", "online", null], ["c4", "idle", null]],
  );
  assert.deepEqual(w.statuses.get("bob"), {
    status: "idle", lastUpdated: "2026-11-22T08:05:00Z", lastActive: "2026-11-22T07:20:05Z", lastSeen: "2026-11-22T07:20:30Z",
    data: null, dataAt: "2026-11-22T08:05:00Z",
  });
  w.close();
});

test("a dropped socket reconnects with a new ticket and the last cursor; nothing repeats", async () => {
  const { c, ticketCalls } = setup();
  const w = c.watch(["bob"]);
  const seen = record(w);
  await until(() => FakeWebSocket.instances.length === 1, "the socket");
  let ws = FakeWebSocket.last();
  ws.open();
  ws.message({ type: "snapshot", statuses: [{ userId: "bob", status: "offline", lastUpdated: null }], cursor: "c0" });
  ws.message(change("bob", "online", "offline", "2026-11-22T07:20:02Z", "c1"));
  ws.drop(1006);

  await until(() => FakeWebSocket.instances.length === 2, "the second socket");
  assert.equal(ticketCalls.length, 2);
  ws = FakeWebSocket.last();
  assert.deepEqual([...ws.url.searchParams], [["userIds", "bob"], ["cursor", "c1"], ["ticket", "t2"]]);
  ws.open();
  // The server replays from c1: the two changes made while the socket was down.
  ws.message(change("bob", "idle", "online", "2026-11-22T07:20:03Z", "c2"));
  ws.message(change("bob", "offline", "idle", "2026-11-22T07:20:04Z", "c3"));
  assert.equal(ws.sent.length, 0, "a resume needs no subscribe");

  assert.deepEqual(
    seen.map(([t, p]) => (t === "change" ? `${t}:${p.status}` : t === "open" ? `open:${p.resumed}` : t)),
    ["open:false", "snapshot", "change:online", "reconnecting", "open:true", "change:idle", "change:offline"],
  );
  assert.deepEqual(w.statuses.get("bob"), { status: "offline", lastUpdated: "2026-11-22T07:20:04Z", lastActive: null, lastSeen: null, data: null, dataAt: "2026-11-22T07:20:04Z" });
  w.close();
  assert.deepEqual(ws.closed, { code: 1000, reason: "client closed" });
});

test("users subscribed while the socket was down are subscribed after the resume, not put in its URL", async () => {
  const { c } = setup();
  const w = c.watch(["bob"]);
  await until(() => FakeWebSocket.instances.length === 1, "the socket");
  let ws = FakeWebSocket.last();
  ws.open();
  ws.message({ type: "snapshot", statuses: [{ userId: "bob", status: "online", lastUpdated: "2026-11-22T07:20:00Z" }], cursor: "c0" });
  ws.drop();
  w.subscribe(["carol"]);
  await until(() => FakeWebSocket.instances.length === 2, "the second socket");
  ws = FakeWebSocket.last();
  // carol's state is not continuous with c0: she needs a snapshot of her own.
  assert.equal(ws.url.searchParams.get("userIds"), "bob");
  assert.equal(ws.url.searchParams.get("cursor"), "c0");
  ws.open();
  assert.deepEqual(ws.sent, [{ op: "subscribe", userIds: ["carol"] }]);
  ws.message({ type: "snapshot", statuses: [{ userId: "carol", status: "idle", lastUpdated: "2026-11-22T07:19:00Z" }], cursor: "c1" });
  assert.deepEqual(w.statuses.get("carol"), { status: "idle", lastUpdated: "2026-11-22T07:19:00Z", lastActive: null, lastSeen: null, data: null, dataAt: null });
  w.unsubscribe(["bob"]);
  assert.deepEqual(ws.sent.at(-1), { op: "unsubscribe", userIds: ["bob"] });
  assert.equal(w.statuses.has("bob"), false);
  w.close();
});

test("subscribe after the first snapshot sends the command once; known users are not sent again", async () => {
  const { c } = setup();
  const w = c.watch([]);
  await until(() => FakeWebSocket.instances.length === 1, "the socket");
  const ws = FakeWebSocket.last();
  assert.equal(ws.url.searchParams.has("userIds"), false);
  ws.open();
  w.subscribe(["dave"]); // before the connection's snapshot: held back
  assert.deepEqual(ws.sent, []);
  ws.message({ type: "snapshot", statuses: [], cursor: "c0" });
  assert.deepEqual(ws.sent, [{ op: "subscribe", userIds: ["dave"] }]);
  ws.message({ type: "snapshot", statuses: [{ userId: "dave", status: "offline", lastUpdated: null }], cursor: "c1" });
  w.subscribe(["dave"]);
  assert.equal(ws.sent.length, 1);
  w.close();
});

test("cursor_expired: the fresh snapshot replaces what is held", async () => {
  const { c } = setup();
  const w = c.connect({ userIds: ["bob"], cursor: "old" });
  const seen = record(w);
  await until(() => FakeWebSocket.instances.length === 1, "the socket");
  const ws = FakeWebSocket.last();
  assert.equal(ws.url.searchParams.get("cursor"), "old");
  ws.open();
  ws.message({ type: "error", code: "cursor_expired", message: "the cursor is older than the log; a fresh snapshot follows" });
  ws.message({ type: "snapshot", statuses: [{ userId: "bob", status: "idle", lastUpdated: "2026-11-22T08:00:00Z" }], cursor: "fresh" });
  assert.deepEqual(w.statuses.get("bob"), { status: "idle", lastUpdated: "2026-11-22T08:00:00Z", lastActive: null, lastSeen: null, data: null, dataAt: null });
  assert.equal(w.cursor, "fresh");
  assert.deepEqual(seen.map(([t]) => t), ["open", "error", "snapshot"]);
  assert.equal(ws.sent.length, 0, "the snapshot was the connection's, not an answer to a subscribe");
  w.close();
});

test("a 403 for the ticket ends the watch; other failures are retried", async () => {
  let n = 0;
  const answers = [
    () => new Response("", { status: 502 }),
    () => new Response(JSON.stringify({ error: { code: "forbidden", message: "no" } }), { status: 403 }),
  ];
  const c = new PulseClient({
    ingestUrl: "http://i",
    queryUrl: "http://q",
    deviceId: "d",
    token,
    WebSocket: FakeWebSocket,
    sleep: async () => {},
    retry: { maxAttempts: 1 },
    fetch: async () => answers[n++](),
  });
  const w = c.watch(["bob"]);
  const seen = record(w);
  await until(() => seen.some(([t]) => t === "close"), "the end");
  assert.deepEqual(
    seen.map(([t, p]) => (t === "error" ? `error:${p.status}` : t)),
    ["error:502", "reconnecting", "error:403", "close"],
  );
  assert.equal(FakeWebSocket.instances.length, 0);
});

test("present mode: the URL names the device; status and activity go over the socket and resolve on ack", async () => {
  const { c } = setup();
  const w = c.connect({ present: true, userIds: ["bob"] });
  await until(() => FakeWebSocket.instances.length === 1, "the socket");
  let ws = FakeWebSocket.last();
  assert.deepEqual([...ws.url.searchParams], [["present", "tab-1"], ["userIds", "bob"], ["ticket", "t1"]]);
  ws.open();
  ws.message({ type: "snapshot", statuses: [{ userId: "bob", status: "offline", lastUpdated: null }], cursor: "c0" });

  const set = w.setStatus("idle");
  const act = w.activity();
  assert.deepEqual(ws.sent, [{ op: "status", status: "idle" }, { op: "activity" }]);
  ws.message({ type: "ack", op: "status", eventId: "e1" });
  ws.message({ type: "error", code: "rate_limited", message: "slow down" });
  assert.equal(await set, "e1");
  await assert.rejects(act, (err) => err instanceof PulseError && err.code === "rate_limited" && err.message === "slow down");

  // After a drop, the status set is asserted again on the new socket.
  ws.drop();
  await until(() => FakeWebSocket.instances.length === 2, "the second socket");
  ws = FakeWebSocket.last();
  assert.equal(ws.url.searchParams.get("present"), "tab-1");
  ws.open();
  assert.deepEqual(ws.sent, [{ op: "status", status: "idle" }]);

  // Activity taken after idle: the device is online, for custom statuses and reconnects.
  const back = w.activity();
  ws.message({ type: "ack", op: "status", eventId: "e2" }); // the re-assertion's
  ws.message({ type: "ack", op: "activity", eventId: "e3" });
  assert.equal(await back, "e3");

  const custom = w.setCustomStatus({ text: "in a meeting", emoji: "📅", until: "2026-11-22T09:00:00Z" });
  assert.deepEqual(ws.sent.at(-1), { op: "status", status: "online", data: { text: "in a meeting", emoji: "📅", until: "2026-11-22T09:00:00Z" } });
  ws.message({ type: "error", code: "invalid_command", message: "unknown field data" });
  await assert.rejects(custom, (err) => err.code === "invalid_command");

  w.close();
  assert.deepEqual(ws.closed, { code: 1000, reason: "client closed" });
});

test("present-mode commands fail without present mode, and after close", async () => {
  const { c } = setup();
  const w = c.watch(["bob"]);
  await assert.rejects(w.setStatus("online"), /present mode/);
  const p = c.connect({ present: true });
  p.close();
  await assert.rejects(p.setStatus("online"), (err) => err.code === "disconnected");
  w.close();
});

test("micros keeps microseconds and understands offsets", () => {
  assert.equal(micros("2026-11-22T07:20:01.123456Z") - micros("2026-11-22T07:20:01.123455Z"), 1);
  assert.equal(micros("2026-11-22T07:20:03.5Z"), micros("2026-11-22T07:20:03.500000Z"));
  assert.equal(micros("2026-11-22T08:20:03+01:00"), micros("2026-11-22T07:20:03Z"));
  assert.ok(Number.isNaN(micros("yesterday")));
});
