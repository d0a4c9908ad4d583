import assert from "node:assert/strict";
import { afterEach, test } from "node:test";

import { trackActivity } from "../../dist/index.js";

/** A page: a window and a document whose listeners the test fires. */
function fakePage(visibilityState = "visible") {
  const listeners = new Map();
  const target = () => ({
    addEventListener: (type, fn) => listeners.set(type, [...(listeners.get(type) ?? []), fn]),
    removeEventListener: (type, fn) => listeners.set(type, (listeners.get(type) ?? []).filter((f) => f !== fn)),
  });
  const page = {
    window: target(),
    document: { ...target(), visibilityState },
    fire: (type) => (listeners.get(type) ?? []).forEach((fn) => fn({ type })),
    count: () => [...listeners.values()].reduce((n, l) => n + l.length, 0),
  };
  globalThis.window = page.window;
  globalThis.document = page.document;
  return page;
}

function sink() {
  const sent = [];
  return { sent, setStatus: async (s) => void sent.push(s), activity: async () => void sent.push("activity") };
}

afterEach(() => {
  delete globalThis.window;
  delete globalThis.document;
});

test("outside a browser it does nothing", () => {
  const s = sink();
  const stop = trackActivity(s);
  stop();
  assert.deepEqual(s.sent, []);
});

test("input is activity, throttled; hidden is idle; coming back is activity at once", (t) => {
  t.mock.timers.enable({ apis: ["setTimeout", "Date"] });
  const page = fakePage();
  const s = sink();
  const stop = trackActivity(s, { idleAfterMs: 60_000, throttleMs: 10_000 });
  assert.deepEqual(s.sent, ["activity"], "a visible page starts active");

  page.fire("keydown");
  page.fire("pointermove");
  assert.deepEqual(s.sent, ["activity"], "within the throttle");
  t.mock.timers.tick(10_000);
  page.fire("keydown");
  assert.deepEqual(s.sent, ["activity", "activity"]);

  page.document.visibilityState = "hidden";
  page.fire("visibilitychange");
  assert.deepEqual(s.sent.at(-1), "idle");
  page.document.visibilityState = "visible";
  page.fire("visibilitychange");
  assert.deepEqual(s.sent.slice(2), ["idle", "activity"], "back from idle is not throttled");

  // No input for idleAfterMs: idle, once.
  t.mock.timers.tick(60_000);
  t.mock.timers.tick(60_000);
  assert.deepEqual(s.sent.slice(4), ["idle"]);

  stop();
  assert.equal(page.count(), 0, "stop removes every listener");
  page.fire("keydown");
  assert.equal(s.sent.length, 5);
});

test("a page hidden from the start is idle", () => {
  fakePage("hidden");
  const s = sink();
  trackActivity(s)();
  assert.deepEqual(s.sent, ["idle"]);
});

test("hidden for hiddenIdleAfterMs is idle; back before it, nothing is sent", (t) => {
  t.mock.timers.enable({ apis: ["setTimeout", "Date"] });
  const page = fakePage();
  const s = sink();
  const stop = trackActivity(s, { idleAfterMs: 60_000, hiddenIdleAfterMs: 2_000, throttleMs: 10_000 });
  assert.deepEqual(s.sent, ["activity"]);

  page.document.visibilityState = "hidden";
  page.fire("visibilitychange");
  t.mock.timers.tick(1_999);
  assert.deepEqual(s.sent, ["activity"], "not idle before hiddenIdleAfterMs");
  page.document.visibilityState = "visible";
  page.fire("visibilitychange");
  assert.deepEqual(s.sent, ["activity"], "back within the throttle and never idle: nothing new");

  page.document.visibilityState = "hidden";
  page.fire("visibilitychange");
  t.mock.timers.tick(2_000);
  assert.deepEqual(s.sent, ["activity", "idle"]);
  stop();
});
