// The client against a running ingest and query (tests/jsclient_test.go starts them
// and sets the variables). Without the variables these tests fail, unless
// PULSE_STACK_TESTS=off says to skip them.
import assert from "node:assert/strict";
import net from "node:net";
import { after, before, test } from "node:test";

import { PulseClient, PulseError, micros, subjectOf } from "../../dist/index.js";

const names = ["PULSE_INGEST_URL", "PULSE_QUERY_URL", "PULSE_USER_TOKEN_ALICE", "PULSE_USER_TOKEN_BOB"];
const off = process.env.PULSE_STACK_TESTS === "off";
const missing = names.filter((n) => !process.env[n]);
const skip = off ? "PULSE_STACK_TESTS=off" : false;

const env = Object.fromEntries(names.map((n) => [n, process.env[n] ?? ""]));
const WAIT_MS = 20_000;

/** The next `type` event of w that satisfies pred, or a failure after WAIT_MS. */
function next(w, type, pred = () => true, what = type) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      off();
      reject(new Error(`timed out after ${WAIT_MS} ms waiting for ${what}`));
    }, WAIT_MS);
    const off = w.on(type, (p) => {
      if (!pred(p)) return;
      clearTimeout(timer);
      off();
      resolve(p);
    });
  });
}

/** Logs w's errors and reconnects, which a failure's report then shows. */
function narrate(w, name) {
  w.on("error", (e) => console.log(`${name}: error ${e.status ?? ""} ${e.code}: ${e.message}`));
  w.on("reconnecting", (r) => console.log(`${name}: reconnecting (attempt ${r.attempt}, ${r.delayMs} ms, close ${r.code})`));
  return w;
}

/** Polls cond until it returns true, or fails after WAIT_MS. */
async function eventually(cond, what) {
  const deadline = Date.now() + WAIT_MS;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${WAIT_MS} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/**
 * A TCP proxy in front of query whose connections the test can cut, as a network
 * drop would (a reset, no WebSocket close frame), and keep refusing for a while.
 * It notes the request lines that pass through it.
 */
function cuttableProxy(target) {
  const up = new URL(target);
  const sockets = new Set();
  const requests = [];
  let down = false;
  const server = net.createServer((client) => {
    if (down) return client.resetAndDestroy();
    const server = net.connect(Number(up.port), up.hostname);
    sockets.add(client).add(server);
    client.on("data", (b) => {
      for (const m of b.toString("latin1").matchAll(/^(GET|POST) (\S+) HTTP\/1\.1$/gm)) requests.push(`${m[1]} ${m[2]}`);
    });
    client.pipe(server).pipe(client);
    const drop = () => {
      sockets.delete(client);
      sockets.delete(server);
      client.destroy();
      server.destroy();
    };
    client.on("error", drop).on("close", drop);
    server.on("error", drop).on("close", drop);
  });
  return {
    requests,
    listen: () => new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(`http://127.0.0.1:${server.address().port}`))),
    cut() {
      down = true;
      for (const s of sockets) s.resetAndDestroy();
    },
    restore() {
      down = false;
    },
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

let alice, bob, aliceId, bobId;

before(() => {
  if (skip) return;
  if (missing.length > 0) {
    throw new Error(`${missing.join(", ")} not set: tests/jsclient_test.go sets them (go test -run TestJSClient ./tests/); PULSE_STACK_TESTS=off skips these tests`);
  }
  aliceId = subjectOf(env.PULSE_USER_TOKEN_ALICE);
  bobId = subjectOf(env.PULSE_USER_TOKEN_BOB);
  // Reconnects within a second or two, so a blip fits the tests' deadlines.
  const common = { ingestUrl: env.PULSE_INGEST_URL, queryUrl: env.PULSE_QUERY_URL, deviceId: "web", retry: { baseDelayMs: 100, maxDelayMs: 2000 } };
  alice = new PulseClient({ ...common, token: () => env.PULSE_USER_TOKEN_ALICE });
  bob = new PulseClient({ ...common, token: () => env.PULSE_USER_TOKEN_BOB });
});

test("bob goes online: alice's watch gets the snapshot, then the change with its fields", { skip }, async () => {
  const w = narrate(alice.watch([bobId]), "alice");
  try {
    const snap = await next(w, "snapshot");
    assert.deepEqual(snap.statuses, [{ userId: bobId, status: "offline", lastUpdated: null, lastActive: null, lastSeen: null, data: null }]);
    assert.equal(typeof snap.cursor, "string");

    const before = Date.now();
    const eventId = await bob.setStatus("online");
    assert.match(eventId, /^[0-9a-f-]{36}$/);
    const ch = await next(w, "change", (c) => c.userId === bobId, "bob's change");
    const { at, cursor, ...rest } = ch;
    assert.deepEqual(rest, { type: "change", userId: bobId, status: "online", previous: "offline", cause: "event", data: null });
    assert.ok(Math.abs(micros(at) / 1000 - before) < 10_000, `at ${at} is not near the request's time`);
    assert.notEqual(cursor, snap.cursor);
    assert.equal(w.cursor, cursor);
    assert.deepEqual(w.statuses.get(bobId), { status: "online", lastUpdated: at, lastActive: null, lastSeen: null, data: null, dataAt: at });
  } finally {
    w.close();
  }
});

test("alice's connection is cut while bob changes twice: the resume brings both, once, in order", { skip }, async () => {
  // bob starts online, whatever the test before left.
  await bob.setStatus("online");
  await eventually(async () => (await bob.lastSeen([bobId]))[0]?.status === "online", "bob's status to read online");

  const proxy = cuttableProxy(env.PULSE_QUERY_URL);
  const viaProxy = new PulseClient({
    ingestUrl: env.PULSE_INGEST_URL,
    queryUrl: await proxy.listen(),
    deviceId: "web",
    token: () => env.PULSE_USER_TOKEN_ALICE,
    retry: { baseDelayMs: 100, maxDelayMs: 500 },
  });
  const w = narrate(viaProxy.watch([bobId]), "alice via the proxy");
  const changes = [];
  w.on("change", (c) => changes.push(c));
  try {
    const snap = await next(w, "snapshot");
    assert.deepEqual(snap.statuses.map((s) => [s.userId, s.status]), [[bobId, "online"]]);
    const cursorBefore = w.cursor;

    const dropped = next(w, "reconnecting");
    proxy.cut();
    await dropped;
    assert.equal(w.connected, false);

    await bob.setStatus("idle");
    await bob.setStatus("offline");
    // Both changes are in the log once bob's own status reads offline (the
    // aggregator writes Redis, then produces the changes): the socket was down for them.
    await eventually(async () => (await bob.lastSeen([bobId]))[0]?.status === "offline", "bob's status to read offline");
    assert.deepEqual(changes, [], "no change arrived while the connection was cut");

    proxy.restore();
    const resumed = await next(w, "open", (o) => o.resumed, "the resumed socket");
    assert.equal(resumed.resumed, true);
    await eventually(() => changes.length >= 2, "the two missed changes");
    // Anything repeated or extra would arrive right behind them.
    await new Promise((r) => setTimeout(r, 1500));
    assert.deepEqual(
      changes.map((c) => [c.userId, c.previous, c.status, c.cause]),
      [
        [bobId, "online", "idle", "event"],
        [bobId, "idle", "offline", "event"],
      ],
    );
    assert.ok(micros(changes[0].at) < micros(changes[1].at));
    assert.equal(w.statuses.get(bobId)?.status, "offline");
    assert.equal(w.statuses.get(bobId)?.lastUpdated, changes[1].at);

    // The resume used a new ticket and the cursor held before the cut.
    const opens = proxy.requests.filter((r) => r.startsWith("GET /v1/watch?")).map((r) => new URL(r.slice(4), "http://x").searchParams);
    assert.ok(opens.length >= 2, `want at least two feed connections, saw ${opens.length}`);
    const [first, last] = [opens[0], opens.at(-1)];
    assert.equal(first.get("cursor"), null);
    assert.equal(last.get("cursor"), cursorBefore);
    assert.equal(last.get("userIds"), bobId);
    assert.notEqual(last.get("ticket"), first.get("ticket"));
  } finally {
    w.close();
    await proxy.close();
  }
});

test("last seen of a contact list; refusals come back as PulseErrors and feed errors", { skip }, async () => {
  // A user token reads its own user and its pulse_watch users, nobody else.
  const [me, friend] = await alice.lastSeen([aliceId, bobId]);
  assert.deepEqual(me, { userId: aliceId, status: "offline", lastUpdated: null, lastActive: null, lastSeen: null, data: null });
  assert.equal(friend.userId, bobId);
  assert.equal(friend.status, "offline", "the resume test left bob offline");
  for (const k of ["lastUpdated", "lastActive", "lastSeen"]) assert.ok(micros(friend[k]) > 0, `bob's ${k} is ${friend[k]}`);
  await assert.rejects(alice.lastSeen([`${aliceId}-stranger`]), (err) => {
    assert.ok(err instanceof PulseError);
    assert.equal(err.status, 403);
    assert.equal(err.code, "forbidden");
    return true;
  });
  // Events for another user are refused before any is written.
  const wrong = new PulseClient({ ingestUrl: env.PULSE_INGEST_URL, queryUrl: env.PULSE_QUERY_URL, deviceId: "web", token: env.PULSE_USER_TOKEN_ALICE, userId: bobId });
  await assert.rejects(wrong.activity(), (err) => err instanceof PulseError && err.status === 403 && err.code === "forbidden");

  // Subscribing a user outside alice's pulse_watch claim: a forbidden error message,
  // and the connection carries on.
  const w = alice.watch([bobId]);
  try {
    await next(w, "snapshot");
    w.subscribe([`${aliceId}-stranger`]);
    const err = await next(w, "error");
    assert.equal(err.code, "forbidden");
    assert.equal(w.connected, true);
  } finally {
    w.close();
  }
});

test("present mode: bob's socket is his device: open, status, activity, close", { skip }, async () => {
  // bob starts offline, whatever the tests before left.
  await bob.setStatus("offline");
  await eventually(async () => (await bob.lastSeen([bobId]))[0]?.status === "offline", "bob's status to read offline");

  const w = narrate(alice.watch([bobId]), "alice");
  const changes = [];
  w.on("change", (c) => changes.push([c.previous, c.status, c.cause, c.data?.text ?? null]));
  const tab = new PulseClient({
    ingestUrl: env.PULSE_INGEST_URL,
    queryUrl: env.PULSE_QUERY_URL,
    deviceId: "bob-tab",
    token: env.PULSE_USER_TOKEN_BOB,
  });
  let present;
  try {
    const snap = await next(w, "snapshot");
    assert.deepEqual(snap.statuses.map((s) => [s.userId, s.status]), [[bobId, "offline"]]);

    // Opening the socket is a heartbeat of bob-tab: bob comes online.
    present = narrate(tab.connect({ present: true, userIds: [aliceId] }), "bob's present socket");
    await next(present, "snapshot");
    await eventually(() => changes.length === 1, "bob online");

    const idleId = await present.setStatus("idle");
    assert.match(idleId, /^[0-9a-f-]{36}$/);
    await eventually(() => changes.length === 2, "bob idle");
    const activeId = await present.activity();
    assert.notEqual(activeId, idleId);
    await eventually(() => changes.length === 3, "bob active again");

    // A custom status keeps the device's status (online): alice's watch gets a change
    // of it alone and keeps it, and it reads back as data.
    const customId = await present.setCustomStatus({ text: "In a meeting", emoji: "📅" });
    assert.match(customId, /^[0-9a-f-]{36}$/);
    await eventually(() => changes.length === 4, "bob's custom status");
    assert.deepEqual(w.statuses.get(bobId)?.data, { text: "In a meeting", emoji: "📅" });
    assert.deepEqual((await alice.lastSeen([bobId]))[0].data, { text: "In a meeting", emoji: "📅" });
    // A bad one is refused by name, and nothing is posted.
    await assert.rejects(present.setCustomStatus({ emoji: "📅📅" }),
      (err) => err instanceof PulseError && err.code === "invalid_command" && /data\.emoji/.test(err.message));

    // A close the client starts posts the device offline at once.
    present.close();
    await eventually(() => changes.length === 5, "bob offline");
    await new Promise((r) => setTimeout(r, 1000));
    assert.deepEqual(changes, [
      ["offline", "online", "event", null],
      ["online", "idle", "event", null],
      ["idle", "online", "event", null],
      ["online", "online", "event", "In a meeting"],
      ["online", "offline", "event", null],
    ]);
    assert.equal(w.statuses.get(bobId)?.status, "offline");
  } finally {
    present?.close();
    w.close();
  }
});

test("429s of a rate-limited query are waited out by their Retry-After", { skip: skip || (!process.env.PULSE_QUERY_URL_LIMITED && "PULSE_QUERY_URL_LIMITED is not set") }, async () => {
  // That query lets a user token read once a second in bursts of two: of four reads
  // at once, two are refused with a 429 and Retry-After, and are retried after it.
  const answers = [];
  const waits = [];
  const limited = new PulseClient({
    ingestUrl: env.PULSE_INGEST_URL,
    queryUrl: process.env.PULSE_QUERY_URL_LIMITED,
    deviceId: "web",
    token: env.PULSE_USER_TOKEN_ALICE,
    fetch: async (url, init) => {
      const res = await fetch(url, init);
      answers.push([res.status, res.headers.get("Retry-After")]);
      return res;
    },
    sleep: (ms) => {
      waits.push(ms);
      return new Promise((r) => setTimeout(r, ms));
    },
  });
  const reads = await Promise.all([1, 2, 3, 4].map(() => limited.lastSeen([aliceId])));
  for (const r of reads) assert.deepEqual(r, [{ userId: aliceId, status: "offline", lastUpdated: null, lastActive: null, lastSeen: null, data: null }]);
  const refused = answers.filter(([status]) => status === 429);
  assert.ok(refused.length >= 2, `want at least two 429s, saw ${JSON.stringify(answers)}`);
  assert.equal(answers.filter(([status]) => status === 200).length, 4);
  // Every wait was the Retry-After of the 429 before it (whole seconds, at least 1).
  assert.equal(waits.length, refused.length);
  assert.deepEqual(
    waits.toSorted((a, b) => a - b),
    refused.map(([, ra]) => Number(ra) * 1000).toSorted((a, b) => a - b),
  );
  assert.ok(waits.every((ms) => ms >= 1000));
  console.log(`stack: rate-limited reads answered ${answers.map(([s]) => s).join(",")}, waits ${waits.join(",")} ms`);
});

after(() => {
  if (!skip && missing.length === 0) console.log(`stack: ingest ${env.PULSE_INGEST_URL}, query ${env.PULSE_QUERY_URL}, users ${aliceId} and ${bobId}`);
});
