// The demo chat page: one user's presence through a present socket, and their friends'
// presence and custom status, live. Everything goes through the JavaScript client
// (clients/js), served at /client/ by `pulsectl demo`.
import { PulseClient, trackActivity, subjectOf } from "/client/index.js";

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
// Idle after this long without input, or this long in the background (milliseconds).
const idleAfterMs = Number(params.get("idleAfterMs") ?? 5 * 60_000);
const hiddenIdleAfterMs = Number(params.get("hiddenIdleAfterMs") ?? 60_000);
// Last-seen times are read again this often: the feed's changes carry the status and
// the custom status, not last-seen.
const refreshMs = Number(params.get("refreshMs") ?? 5_000);

/** The token's pulse_watch claim: the user's friends. */
function friendsOf(token) {
  const part = token.split(".")[1] ?? "";
  const json = atob(part.replace(/-/g, "+").replace(/_/g, "/"));
  const claims = JSON.parse(json);
  return Array.isArray(claims.pulse_watch) ? claims.pulse_watch : [];
}

/** A device id per browser tab, kept across reloads of that tab. */
function deviceId() {
  let id = sessionStorage.getItem("pulse-demo-device");
  if (!id) {
    id = "web-" + crypto.randomUUID().slice(0, 8);
    sessionStorage.setItem("pulse-demo-device", id);
  }
  return id;
}

function since(iso) {
  if (!iso) return "never seen";
  const s = Math.max(0, Math.round((Date.now() - Date.parse(iso)) / 1000));
  return s < 60 ? `seen ${s}s ago` : s < 3600 ? `seen ${Math.round(s / 60)} min ago` : `seen ${new Date(iso).toLocaleString()}`;
}

function renderFriend(id, status, full) {
  let li = document.querySelector(`#friends li[data-user="${CSS.escape(id)}"]`);
  if (!li) {
    li = document.createElement("li");
    li.dataset.user = id;
    li.innerHTML = '<span class="dot"></span><span class="name"></span><span class="state"></span><span class="custom"></span><span class="seen"></span>';
    li.querySelector(".name").textContent = id;
    $("friends").append(li);
  }
  li.dataset.status = status.status;
  li.querySelector(".state").textContent = status.status;
  const data = status.data;
  li.querySelector(".custom").textContent = data ? [data.emoji, data.text].filter(Boolean).join(" ") : "";
  li.querySelector(".seen").textContent = status.status === "offline" ? since(full?.lastSeen ?? status.lastSeen) : "";
}

async function start(token) {
  const cfg = await (await fetch("/config.json")).json();
  const me = subjectOf(token);
  const friends = friendsOf(token);
  const pulse = new PulseClient({ ingestUrl: cfg.ingestUrl, queryUrl: cfg.queryUrl, token, deviceId: deviceId() });
  $("me").textContent = me;
  $("login").hidden = true;
  $("chat").hidden = false;

  // Full statuses (for last seen) of the friends, refreshed after changes.
  let full = new Map();
  let refreshing;
  const refresh = () => {
    clearTimeout(refreshing);
    refreshing = setTimeout(async () => {
      try {
        full = new Map((await pulse.lastSeen(friends)).map((s) => [s.userId, s]));
        for (const [id, st] of feed.statuses) if (id !== me) renderFriend(id, st, full.get(id));
      } catch (err) {
        console.warn("reading friends' statuses", err);
      }
    }, 100);
  };

  const feed = pulse.connect({ present: true, userIds: friends });
  feed.on("open", ({ resumed }) => ($("connection").textContent = resumed ? "connected (resumed)" : "connected"));
  feed.on("reconnecting", () => ($("connection").textContent = "reconnecting…"));
  feed.on("status", (statuses) => {
    for (const [id, st] of statuses) if (id !== me) renderFriend(id, st, full.get(id));
  });
  feed.on("snapshot", refresh);
  setInterval(refresh, refreshMs);
  feed.on("change", (c) => {
    const li = document.createElement("li");
    Object.assign(li.dataset, { user: c.userId, status: c.status, previous: c.previous, at: c.at, cause: c.cause });
    const what = c.status === c.previous
      ? `custom status ${c.data ? [c.data.emoji, c.data.text].filter(Boolean).join(" ") : "cleared"}`
      : `${c.previous} → ${c.status}`;
    li.textContent = `${new Date(c.at).toLocaleTimeString()} ${c.userId}: ${what} (${c.cause})`;
    $("log").prepend(li);
    refresh();
  });
  feed.on("error", (e) => console.warn("feed", e));

  let stopTracking = trackActivity(feed, { idleAfterMs, hiddenIdleAfterMs });
  $("my-status").onchange = async (ev) => {
    const status = ev.target.value;
    stopTracking(); // activity would make the device online again
    if (status === "online") stopTracking = trackActivity(feed, { idleAfterMs, hiddenIdleAfterMs });
    await feed.setStatus(status);
  };
  const customError = (err) => ($("custom-error").textContent = err?.message ?? String(err));
  $("custom-set").onclick = async () => {
    $("custom-error").textContent = "";
    const until = $("custom-until").value;
    let at;
    if (until) {
      const [h, m] = until.split(":").map(Number);
      const d = new Date();
      d.setHours(h, m, 0, 0);
      if (d <= new Date()) d.setDate(d.getDate() + 1);
      at = d.toISOString();
    }
    const data = { text: $("custom-text").value || undefined, emoji: $("custom-emoji").value || undefined, until: at };
    await feed.setCustomStatus(data).catch(customError);
  };
  $("custom-clear").onclick = () => feed.setCustomStatus({}).catch(customError);

  const leave = () => {
    stopTracking();
    feed.close(); // a close the client starts: the device is offline at once
  };
  addEventListener("pagehide", leave);
  $("logout").onclick = () => {
    leave();
    $("chat").hidden = true;
    $("login").hidden = false;
  };
}

$("login-button").onclick = () => {
  const token = $("token").value.trim();
  try {
    subjectOf(token);
    friendsOf(token);
  } catch {
    $("login-error").textContent = "that is not a user token";
    return;
  }
  start(token).catch((err) => ($("login-error").textContent = err.message));
};
