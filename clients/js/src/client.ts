import type { components } from "./generated/openapi.js";
import { subjectOf } from "./jwt.js";
import { retrier, withRetries, type Retrier, type RetryOptions } from "./retry.js";
import { Watch, type ConnectOptions, type Status, type WebSocketConstructor } from "./watch.js";

/** A user's full status: `{userId, status, lastUpdated, lastActive, lastSeen}`. */
export type FullStatus = components["schemas"]["FullStatus"];
/** An event as POST /v1/events takes it. */
export type Event = components["schemas"]["Event"];

/** PulseClient's configuration. */
export interface PulseClientOptions {
  /** Ingest's base URL, e.g. `https://ingest.example.com`. */
  ingestUrl: string;
  /** Query's base URL, e.g. `https://query.example.com`; the feed is at its /v1/watch. */
  queryUrl: string;
  /**
   * The user token (or API key), asked for before every request and connection, so
   * a function that refreshes an expiring token keeps the client going.
   */
  token: string | (() => Promise<string> | string);
  /** This device's id (1–128 bytes): a phone, a browser tab's install, … */
  deviceId: string;
  /** The user the events are for. Default: the token's `sub` claim. */
  userId?: string;
  /** Default: globalThis.WebSocket (Node 20 needs `--experimental-websocket`). */
  WebSocket?: WebSocketConstructor;
  /** Default: globalThis.fetch. */
  fetch?: typeof fetch;
  /** Retries of HTTP requests, and the backoff of the feed's reconnects. */
  retry?: RetryOptions;
  /** For tests: how to wait between attempts. Default: setTimeout. */
  sleep?: (ms: number) => Promise<void>;
  /** For tests: the jitter's randomness, in [0, 1). Default: Math.random. */
  random?: () => number;
}

/**
 * A Pulse client for one user on one device: posts the device's status, heartbeats
 * and activity to ingest, reads statuses from query, and watches users over the
 * change feed. It needs only `fetch` and `WebSocket`, so it runs in browsers and in
 * Node 20 or later.
 *
 * @example
 * ```ts
 * const pulse = new PulseClient({ ingestUrl, queryUrl, deviceId: "web-1", token: () => auth.token() });
 * const feed = pulse.connect({ present: true, userIds: friends });
 * feed.on("change", (c) => render(c.userId, c.status));
 * ```
 */
export class PulseClient {
  readonly #ingestUrl: string;
  readonly #queryUrl: string;
  readonly #token: () => Promise<string>;
  readonly #deviceId: string;
  readonly #userId: string | undefined;
  readonly #fetch: typeof fetch;
  readonly #WebSocket: WebSocketConstructor | undefined;
  readonly #retry: Retrier;

  constructor(opts: PulseClientOptions) {
    this.#ingestUrl = opts.ingestUrl.replace(/\/+$/, "");
    this.#queryUrl = opts.queryUrl.replace(/\/+$/, "");
    const token = opts.token;
    this.#token = typeof token === "function" ? async () => token() : async () => token;
    this.#deviceId = opts.deviceId;
    this.#userId = opts.userId;
    // Called through a closure: a browser's fetch refuses to run with another `this`.
    const f = opts.fetch ?? globalThis.fetch;
    this.#fetch = (input, init) => f(input, init);
    this.#WebSocket = opts.WebSocket ?? (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket;
    this.#retry = retrier(opts.retry, opts.sleep, opts.random);
  }

  /** Sets this device's status (`invisible`: seen as offline by everyone else). */
  async setStatus(status: Status): Promise<string> {
    return this.#post({ kind: "status", status });
  }

  /** Sets this device invisible: others see the user offline while it stays online. */
  async setInvisible(): Promise<string> {
    return this.setStatus("invisible");
  }

  /**
   * Says the device is still connected (every 25–30 s without a present socket):
   * it brings an offline device back online and leaves an idle one idle.
   */
  async heartbeat(): Promise<string> {
    return this.#post({ kind: "heartbeat" });
  }

  /** Says the user did something on this device: it is online, not idle. */
  async activity(): Promise<string> {
    return this.#post({ kind: "activity" });
  }

  /**
   * The full statuses of users, in the order asked (POST /v1/statuses): the status,
   * when it last changed (`lastUpdated`), the newest status or activity event
   * (`lastActive`) and the newest event of any kind (`lastSeen`), each null for a
   * user Pulse never saw. A contact list's "last seen" in one read: a user token may
   * read its own user and those of its `pulse_watch` claim (anyone else is a 403).
   */
  async lastSeen(userIds: string[]): Promise<FullStatus[]> {
    const res = await withRetries(this.#retry, this.#fetch, async () => [
      `${this.#queryUrl}/v1/statuses`,
      { method: "POST", headers: await this.#headers(true), body: JSON.stringify({ userIds }) },
    ]);
    const body = (await res.json()) as components["schemas"]["FullStatuses"];
    return body.statuses;
  }

  /** Watches users over the change feed; see connect. */
  watch(userIds: Iterable<string>): Watch {
    return this.connect({ userIds });
  }

  /**
   * Opens a change-feed connection: a ticket from POST /v1/watch/tickets (the
   * token goes in a header, never in the URL), then `/v1/watch?userIds=…&ticket=…`.
   * With `present: true` the socket also stands for this device (see Watch.setStatus).
   * The connection reconnects by itself until `close()`.
   */
  connect(opts: ConnectOptions = {}): Watch {
    if (!this.#WebSocket) {
      throw new Error("no WebSocket: pass the WebSocket option (Node 20 needs --experimental-websocket)");
    }
    return new Watch(
      { queryUrl: this.#queryUrl, WebSocket: this.#WebSocket, ticket: () => this.ticket(), retry: this.#retry },
      opts,
      this.#deviceId,
    );
  }

  /** A single-use feed ticket (POST /v1/watch/tickets), valid for about 30 s. */
  async ticket(): Promise<string> {
    const res = await withRetries(this.#retry, this.#fetch, async () => [
      `${this.#queryUrl}/v1/watch/tickets`,
      { method: "POST", headers: await this.#headers(false) },
    ]);
    const body = (await res.json()) as components["schemas"]["WatchTicket"];
    return body.ticket;
  }

  /**
   * Posts one event for this device. Its eventId is made once, before the first
   * attempt, so every retry carries the same one and the server applies it once.
   * @returns the event's id.
   */
  async #post(fields: { kind: "status"; status: Status } | { kind: "heartbeat" | "activity" }): Promise<string> {
    const eventId = crypto.randomUUID();
    let userId = this.#userId;
    await withRetries(this.#retry, this.#fetch, async () => {
      const headers = await this.#headers(true);
      userId ??= subjectOf(bearerOf(headers));
      const event = { eventId, userId, deviceId: this.#deviceId, ...fields } satisfies Event;
      return [`${this.#ingestUrl}/v1/events`, { method: "POST", headers, body: JSON.stringify({ events: [event] }) }];
    });
    return eventId;
  }

  async #headers(json: boolean): Promise<Record<string, string>> {
    const h: Record<string, string> = { Authorization: `Bearer ${await this.#token()}` };
    if (json) h["Content-Type"] = "application/json";
    return h;
  }
}

function bearerOf(headers: Record<string, string>): string {
  return (headers.Authorization ?? "").replace(/^Bearer /, "");
}
