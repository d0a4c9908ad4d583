import { Emitter } from "./emitter.js";
import { PulseError } from "./errors.js";
import type { components } from "./generated/openapi.js";
import { backoffMs, type Retrier } from "./retry.js";
import { micros } from "./time.js";

/** A user's presence as Pulse reports it. */
export type Status = components["schemas"]["Status"];
/** `{"type":"snapshot","statuses":[…],"cursor"}`: watched users' current statuses. */
export type Snapshot = components["schemas"]["WatchSnapshot"];
/**
 * `{"type":"change",…}`: one effective change of a watched user: a transition of the
 * status, or of the custom status alone (`status` equals `previous`).
 */
export type Change = components["schemas"]["WatchChange"];
/**
 * `{"type":"error","code","message"}`: something the connection survives, such as a
 * refused command or `cursor_expired`.
 */
export type FeedError = Omit<components["schemas"]["WatchError"], "code"> & {
  code: components["schemas"]["WatchError"]["code"] | (string & {});
};
/** `{"type":"ack","op","eventId"}`: a present-mode command's event was written. */
export type Ack = components["schemas"]["WatchAck"];

/** What the connection holds for one watched user. */
export interface UserStatus {
  status: Status;
  /** When the status took effect (RFC 3339); null for a user Pulse never saw change. */
  lastUpdated: string | null;
  /**
   * The newest status or activity event and the newest event of any kind, as of the
   * user's last snapshot (changes do not carry them); null when unknown.
   */
  lastActive: string | null;
  lastSeen: string | null;
  /** The user's custom status; null for none (or none the connection may see). */
  data: CustomStatus | null;
  /**
   * The newest time the custom status is known as of: a snapshot's lastActive (a
   * custom status is set by a status event, which moves it), then each change's `at`.
   */
  dataAt: string | null;
}

/** A custom status: a text, an emoji and when it clears itself. */
export type CustomStatus = components["schemas"]["CustomStatus"];

/** The events of a Watch, by name, with their payloads. */
export interface WatchEvents {
  /** A snapshot arrived: at the start, after a subscribe, after `cursor_expired`. */
  snapshot: Snapshot;
  /** A watched user changed. Changes the held status already reflects are not emitted. */
  change: Change;
  /** The statuses map changed (after every snapshot and emitted change). */
  status: ReadonlyMap<string, UserStatus>;
  /** An error message from the server, or a failure to (re)connect. */
  error: FeedError | PulseError;
  /** A socket opened; `resumed` when it continues from the last cursor. */
  open: { resumed: boolean };
  /** The socket dropped; the next attempt starts after `delayMs`. */
  reconnecting: { attempt: number; delayMs: number; code: number; reason: string };
  /** The connection ended for good: close() was called, or a reconnect was pointless. */
  close: { code: number; reason: string };
}

/** The part of the WebSocket API the client uses; browsers' and Node's both fit. */
export interface WebSocketLike {
  readonly readyState: number;
  send(data: string): void;
  close(code?: number, reason?: string): void;
  onopen: ((ev: unknown) => void) | null;
  onmessage: ((ev: { data: unknown }) => void) | null;
  onclose: ((ev: { code: number; reason: string }) => void) | null;
  onerror: ((ev: unknown) => void) | null;
}

/** A WebSocket constructor: globalThis.WebSocket or a compatible one. */
export type WebSocketConstructor = new (url: string) => WebSocketLike;

/** What the connection needs from its client. */
export interface WatchDeps {
  /** The query service's base URL, http(s). */
  queryUrl: string;
  WebSocket: WebSocketConstructor;
  /** A single-use ticket for the next connection (POST /v1/watch/tickets). */
  ticket: () => Promise<string>;
  /** Backoff between reconnects. */
  retry: Retrier;
}

/** How a connection is opened; see PulseClient.connect. */
export interface ConnectOptions {
  /** Users to watch from the start; more may be subscribed later. */
  userIds?: Iterable<string>;
  /**
   * Present mode: the socket stands for this client's device (`?present=<deviceId>`):
   * while it is open the server counts the socket's pings as the device's heartbeats,
   * and setStatus/activity go over it. close() then posts the device offline.
   */
  present?: boolean;
  /** A cursor to resume from, instead of starting with a snapshot. */
  cursor?: string;
}

type Pending =
  | { kind: "subscribe"; ids: string[] }
  | { kind: "present"; resolve: (eventId: string) => void; reject: (err: PulseError) => void };

/** WebSocket.OPEN. */
const OPEN = 1;

/** Error codes that answer the command at the head of the queue. */
const commandErrors = new Set(["invalid_command", "too_many_users", "forbidden", "rate_limited", "unavailable"]);

/**
 * One change-feed connection, kept alive across network drops.
 *
 * It holds the last cursor it processed and, when the socket drops, reconnects with
 * backoff, a new ticket and `cursor=`, so the server replays exactly what was missed:
 * nothing is lost and nothing repeats. `statuses` is kept current from snapshots and
 * changes; a change whose `at` is not later than the `lastUpdated` held is ignored
 * (docs/feed.md, Duplicates), which makes a resume from a snapshot's cursor exact.
 */
export class Watch extends Emitter<WatchEvents> {
  readonly #deps: WatchDeps;
  readonly #present: string | undefined;
  /** Users asked for, in the order asked. */
  readonly #wanted = new Set<string>();
  /** Users whose state is known and continuous up to #cursor: resumed by URL. */
  readonly #covered = new Set<string>();
  readonly #statuses = new Map<string, UserStatus>();
  #cursor: string | undefined;
  #ws: WebSocketLike | undefined;
  #open = false;
  #closed = false;
  #attempt = 0;
  /** The next snapshot is the connection's own, not a subscribe's answer. */
  #awaitingInitial = false;
  /** Commands sent on this socket that expect an answer, oldest first. */
  #pending: Pending[] = [];
  /** The last status set in present mode, asserted again on every new socket. */
  #presentStatus: Record<string, unknown> | undefined;

  /** @internal Use PulseClient.watch or PulseClient.connect. */
  constructor(deps: WatchDeps, opts: ConnectOptions, deviceId: string) {
    super();
    this.#deps = deps;
    this.#present = opts.present ? deviceId : undefined;
    this.#cursor = opts.cursor;
    for (const id of opts.userIds ?? []) this.#wanted.add(id);
    if (opts.cursor !== undefined) for (const id of this.#wanted) this.#covered.add(id);
    void this.#connect();
  }

  /** The watched users' statuses, kept current. */
  get statuses(): ReadonlyMap<string, UserStatus> {
    return this.#statuses;
  }

  /** The cursor of the last message processed: where a resume continues from. */
  get cursor(): string | undefined {
    return this.#cursor;
  }

  /** Whether a socket is open now. */
  get connected(): boolean {
    return this.#open;
  }

  /**
   * Watches more users. A snapshot of those not watched yet follows; while the socket
   * is down they are subscribed once it is back.
   */
  subscribe(userIds: Iterable<string>): void {
    const added = [...userIds].filter((id) => !this.#wanted.has(id));
    for (const id of added) this.#wanted.add(id);
    if (added.length > 0 && this.#open && !this.#awaitingInitial) this.#sendSubscribe(added);
  }

  /** Stops watching users and forgets their statuses. The server sends no answer. */
  unsubscribe(userIds: Iterable<string>): void {
    const removed = [...userIds].filter((id) => this.#wanted.delete(id));
    for (const id of removed) {
      this.#covered.delete(id);
      this.#statuses.delete(id);
    }
    if (removed.length > 0 && this.#open) this.#send({ op: "unsubscribe", userIds: removed });
  }

  /**
   * Present mode: sets this device's status. Resolves with the event's id once the
   * server acknowledged it (after Kafka did); rejects with a PulseError carrying the
   * server's code (`rate_limited`, `unavailable`, `invalid_command`) or
   * `disconnected` when the socket dropped first. The status is asserted again on
   * every reconnect, so a device that timed out while the network was down comes back
   * as it was set (an invisible user stays invisible).
   */
  setStatus(status: Status): Promise<string> {
    return this.#presentCommand({ op: "status", status }, true);
  }

  /** Present mode: the user did something on this device (it is online, not idle). */
  activity(): Promise<string> {
    const before = this.#presentStatus;
    const sent = this.#presentCommand({ op: "activity" }, false);
    // Once taken, an idle device is online again (an invisible user stays invisible):
    // a later reconnect or custom status must not set it back to idle.
    return sent.then((id) => {
      if (before?.status === "idle" && this.#presentStatus === before) this.#presentStatus = { op: "status", status: "online" };
      return id;
    });
  }

  /**
   * Present mode: sets the user's custom status (`{"text","emoji","until"}`; `{}`
   * clears it). It travels on a status command with the status this device last set
   * (online when none was), so the device's status does not change. Resolves with the
   * event's id once acknowledged; an invalid custom status rejects with
   * `invalid_command` naming the member (`data.emoji: …`).
   */
  setCustomStatus(data: { text?: string; emoji?: string; until?: string }): Promise<string> {
    const status = (this.#presentStatus?.status as Status | undefined) ?? "online";
    // Not asserted again on reconnect: the server keeps it until it is changed or expires.
    return this.#presentCommand({ op: "status", status, data }, false);
  }

  /**
   * Ends the connection for good (close code 1000). In present mode the server posts
   * the device offline; commands still unanswered reject with `disconnected`.
   */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#failStatusWaiters();
    const ws = this.#ws;
    this.#dropSocket();
    if (ws) ws.close(1000, "client closed");
    this.emit("close", { code: 1000, reason: "client closed" });
  }

  async #connect(): Promise<void> {
    if (this.#closed) return;
    let ticket: string;
    try {
      ticket = await this.#deps.ticket();
    } catch (err) {
      const e = err instanceof PulseError ? err : new PulseError({ status: 0, code: "network", message: String(err), cause: err });
      this.emit("error", e);
      // 401/403 do not get better by trying again with the same credential, but the
      // token function may hand out a fresh one next time: only a 403 is final.
      if (e.status === 403) return this.#end(4403, e.message);
      return this.#scheduleReconnect(0, e.message);
    }
    if (this.#closed) return;

    const resumed = this.#cursor !== undefined;
    // Resuming, the URL names only users the cursor covers; the others get a
    // subscribe (and so a snapshot) once the socket is open.
    const inUrl = [...this.#wanted].filter((id) => (resumed ? this.#covered.has(id) : true) && !id.includes(","));
    const params = new URLSearchParams();
    if (this.#present !== undefined) params.set("present", this.#present);
    if (inUrl.length > 0) params.set("userIds", inUrl.join(","));
    if (resumed) params.set("cursor", this.#cursor!);
    params.set("ticket", ticket);
    const url = `${wsBase(this.#deps.queryUrl)}/v1/watch?${params}`;

    let ws: WebSocketLike;
    try {
      ws = new this.#deps.WebSocket(url);
    } catch (err) {
      this.emit("error", new PulseError({ status: 0, code: "network", message: String(err), cause: err }));
      return this.#scheduleReconnect(0, String(err));
    }
    this.#ws = ws;
    ws.onopen = () => {
      if (this.#ws !== ws) return;
      this.#open = true;
      this.#awaitingInitial = !resumed;
      this.emit("open", { resumed });
      if (resumed) this.#afterSnapshotOrResume(new Set(inUrl));
    };
    ws.onmessage = (ev) => {
      if (this.#ws !== ws || typeof ev.data !== "string") return;
      let msg: { type?: unknown };
      try {
        msg = JSON.parse(ev.data) as { type?: unknown };
      } catch {
        return;
      }
      this.#attempt = 0; // the connection works: the next drop starts backoff afresh
      this.#handle(msg, inUrl);
    };
    ws.onclose = (ev) => {
      if (this.#ws !== ws) return;
      this.#dropSocket();
      if (!this.#closed) this.#scheduleReconnect(ev.code, ev.reason);
    };
    ws.onerror = () => {
      // A close event always follows; reconnecting is its business.
    };
  }

  #handle(msg: { type?: unknown }, inUrl: string[]): void {
    switch (msg.type) {
      case "snapshot": {
        const snap = msg as Snapshot;
        let answered: Set<string>;
        if (this.#awaitingInitial) {
          this.#awaitingInitial = false;
          answered = new Set(inUrl);
        } else {
          // Acks of present-mode commands may overtake a subscribe's snapshot (they
          // wait for Kafka), so the answer belongs to the oldest subscribe.
          const i = this.#pending.findIndex((p) => p.kind === "subscribe");
          const [sub] = i >= 0 ? this.#pending.splice(i, 1) : [];
          answered = new Set(sub?.kind === "subscribe" ? sub.ids : []);
        }
        for (const s of snap.statuses) {
          answered.add(s.userId);
          // A user unsubscribed while its snapshot was on the way stays forgotten.
          if (this.#wanted.has(s.userId)) {
            this.#statuses.set(s.userId, {
              status: s.status,
              lastUpdated: s.lastUpdated ?? null,
              lastActive: s.lastActive ?? null,
              lastSeen: s.lastSeen ?? null,
              data: s.data ?? null,
              dataAt: s.lastActive ?? null,
            });
          }
        }
        this.#cursor = snap.cursor;
        this.emit("snapshot", snap);
        this.emit("status", this.#statuses);
        this.#afterSnapshotOrResume(answered);
        return;
      }
      case "change": {
        const ch = msg as Change;
        this.#cursor = ch.cursor;
        if (!this.#wanted.has(ch.userId)) return;
        const held = this.#statuses.get(ch.userId);
        // A change the held state already reflects (re-sent after a resume from a
        // snapshot's cursor) is not news. A change whose status equals previous
        // changed the custom status alone, which the held state knows as of dataAt.
        const dataOnly = ch.status === ch.previous;
        const asOf = dataOnly ? held?.dataAt : held?.lastUpdated;
        if (asOf != null && !(micros(ch.at) > micros(asOf))) return;
        this.#statuses.set(ch.userId, {
          status: ch.status,
          lastUpdated: dataOnly ? (held?.lastUpdated ?? null) : ch.at,
          lastActive: held?.lastActive ?? null,
          lastSeen: held?.lastSeen ?? null,
          data: ch.data ?? null,
          dataAt: held?.dataAt != null && micros(held.dataAt) > micros(ch.at) ? held.dataAt : ch.at,
        });
        this.emit("change", ch);
        this.emit("status", this.#statuses);
        return;
      }
      case "ack": {
        const ack = msg as Ack;
        const i = this.#pending.findIndex((p) => p.kind === "present");
        if (i >= 0) {
          const [p] = this.#pending.splice(i, 1);
          if (p?.kind === "present") p.resolve(ack.eventId);
        }
        return;
      }
      case "error": {
        const err = msg as FeedError;
        if (err.code === "cursor_expired") {
          // The server could not replay from the cursor; a fresh snapshot of the
          // connection's users follows and replaces what is held.
          this.#awaitingInitial = true;
          this.#covered.clear();
        } else if (commandErrors.has(err.code)) {
          const head = this.#pending.shift();
          if (head?.kind === "present") head.reject(new PulseError({ status: 0, code: err.code, message: err.message }));
          if (head?.kind === "subscribe") this.#subscribeRefused(head.ids, err.code);
        }
        this.emit("error", err);
        return;
      }
    }
  }

  /**
   * After the connection's first snapshot, or on a resumed socket: `known` users are
   * now continuous with the cursor; wanted users still unknown get a subscribe, and a
   * present-mode status is asserted again.
   */
  #afterSnapshotOrResume(known: Set<string>): void {
    for (const id of known) if (this.#wanted.has(id)) this.#covered.add(id);
    const missing = [...this.#wanted].filter((id) => !this.#covered.has(id) && !this.#subscribing(id));
    if (missing.length > 0) this.#sendSubscribe(missing);
    if (this.#present !== undefined && this.#presentStatus && !this.#reasserted) {
      this.#reasserted = true;
      // Callers of setStatus while the socket was down learn the outcome from this.
      const waiters = this.#statusWaiters;
      this.#statusWaiters = [];
      this.#pending.push({
        kind: "present",
        resolve: (id) => waiters.forEach((w) => w.resolve(id)),
        reject: (e) => waiters.forEach((w) => w.reject(e)),
      });
      this.#send(this.#presentStatus);
    }
  }

  /** Whether this socket's status was asserted again already. */
  #reasserted = false;
  /** setStatus calls made while no socket was open, answered by the next assertion. */
  #statusWaiters: { resolve: (eventId: string) => void; reject: (err: PulseError) => void }[] = [];

  /**
   * A refused subscribe: users the server will not give (forbidden, too many) are
   * forgotten, so a reconnect does not ask for them again; after a rate limit or an
   * outage the subscribe is sent again a second later.
   */
  #subscribeRefused(ids: string[], code: string): void {
    if (code === "rate_limited" || code === "unavailable") {
      const ws = this.#ws;
      setTimeout(() => {
        if (this.#ws !== ws || !this.#open) return; // a new socket subscribes them anyway
        const again = ids.filter((id) => this.#wanted.has(id) && !this.#covered.has(id) && !this.#subscribing(id));
        if (again.length > 0) this.#sendSubscribe(again);
      }, 1000);
      return;
    }
    for (const id of ids) this.#wanted.delete(id);
  }

  #subscribing(id: string): boolean {
    return this.#pending.some((p) => p.kind === "subscribe" && p.ids.includes(id));
  }

  #sendSubscribe(ids: string[]): void {
    this.#pending.push({ kind: "subscribe", ids });
    this.#send({ op: "subscribe", userIds: ids });
  }

  #presentCommand(cmd: Record<string, unknown>, isStatus: boolean): Promise<string> {
    if (this.#present === undefined) {
      return Promise.reject(new Error("setStatus/activity on a watch need present mode: connect({ present: true })"));
    }
    if (this.#closed) return Promise.reject(new PulseError({ status: 0, code: "disconnected", message: "the connection is closed" }));
    if (isStatus) this.#presentStatus = cmd;
    return new Promise((resolve, reject) => {
      if (!this.#open || this.#awaitingInitial) {
        if (isStatus) {
          // Asserted on the next socket (or once this one's snapshot is in).
          this.#statusWaiters.push({ resolve, reject });
          return;
        }
        reject(new PulseError({ status: 0, code: "disconnected", message: "the socket is not open" }));
        return;
      }
      this.#pending.push({ kind: "present", resolve, reject });
      this.#send(cmd);
    });
  }

  #send(msg: unknown): void {
    if (this.#ws && this.#ws.readyState === OPEN) this.#ws.send(JSON.stringify(msg));
  }

  /** Forgets the current socket: its late events are ignored, its commands fail. */
  #dropSocket(): void {
    const ws = this.#ws;
    this.#ws = undefined;
    this.#open = false;
    this.#awaitingInitial = false;
    this.#reasserted = false;
    if (ws) ws.onopen = ws.onmessage = ws.onclose = ws.onerror = null;
    const pending = this.#pending;
    this.#pending = [];
    for (const p of pending) {
      if (p.kind === "present") p.reject(new PulseError({ status: 0, code: "disconnected", message: "the socket closed before the server answered" }));
    }
  }

  #scheduleReconnect(code: number, reason: string): void {
    if (this.#closed) return;
    const attempt = this.#attempt++;
    // The first retry after a working connection is immediate-ish (a dropped socket
    // is usually the network blinking); then exponential with full jitter.
    const delayMs = Math.max(100, backoffMs(this.#deps.retry, attempt));
    this.emit("reconnecting", { attempt: attempt + 1, delayMs, code, reason });
    void this.#deps.retry.sleep(delayMs).then(() => this.#connect());
  }

  #failStatusWaiters(): void {
    const waiters = this.#statusWaiters;
    this.#statusWaiters = [];
    const err = new PulseError({ status: 0, code: "disconnected", message: "the connection was closed" });
    for (const w of waiters) w.reject(err);
  }

  #end(code: number, reason: string): void {
    this.#closed = true;
    this.#failStatusWaiters();
    this.#dropSocket();
    this.emit("close", { code, reason });
  }
}

/** ws(s):// for http(s)://, keeping any path prefix (a proxy's, say). */
export function wsBase(httpUrl: string): string {
  return httpUrl.replace(/\/+$/, "").replace(/^http(s?):\/\//i, "ws$1://");
}
