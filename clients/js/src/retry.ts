import { PulseError, errorFromResponse } from "./errors.js";

/** How a request is retried. Every field has a default. */
export interface RetryOptions {
  /** Attempts in all, the first included (default 5). 1 disables retries. */
  maxAttempts?: number;
  /** The first backoff's ceiling, in ms, doubled on every attempt (default 250). */
  baseDelayMs?: number;
  /**
   * The longest wait between attempts, in ms (default 30 000). A `Retry-After` longer
   * than this is not waited for: the request fails with that PulseError, whose
   * `retryAfterMs` says when to come back.
   */
  maxDelayMs?: number;
}

/** The fixed parts of the retrying: the RetryOptions with defaults, and the clock. */
export interface Retrier {
  maxAttempts: number;
  baseDelayMs: number;
  maxDelayMs: number;
  sleep: (ms: number) => Promise<void>;
  random: () => number;
}

export function retrier(o: RetryOptions = {}, sleep?: (ms: number) => Promise<void>, random?: () => number): Retrier {
  return {
    maxAttempts: Math.max(1, o.maxAttempts ?? 5),
    baseDelayMs: o.baseDelayMs ?? 250,
    maxDelayMs: o.maxDelayMs ?? 30_000,
    sleep: sleep ?? ((ms) => new Promise((resolve) => setTimeout(resolve, ms))),
    random: random ?? Math.random,
  };
}

/**
 * The wait before retry number `attempt` (0 for the first retry): "full jitter",
 * a uniform draw below base·2^attempt capped at maxDelayMs, so clients that failed
 * together do not come back together.
 */
export function backoffMs(r: Retrier, attempt: number): number {
  const ceiling = Math.min(r.maxDelayMs, r.baseDelayMs * 2 ** Math.min(attempt, 30));
  return Math.floor(r.random() * ceiling);
}

/**
 * Retry-After in milliseconds: Pulse sends delta-seconds; an HTTP date is
 * understood too. undefined when absent or unreadable.
 */
export function retryAfterMs(header: string | null, now = Date.now()): number | undefined {
  if (header === null || header.trim() === "") return undefined;
  const s = header.trim();
  if (/^\d+$/.test(s)) return Number(s) * 1000;
  const at = Date.parse(s);
  return Number.isNaN(at) ? undefined : Math.max(0, at - now);
}

/**
 * Statuses worth another attempt: 429 and 503 are Pulse saying "later" (with
 * Retry-After); 500, 502 and 504 are usually a proxy or a restarting instance.
 * Retrying a write is safe because its event ids do not change between attempts.
 */
const retryable = new Set([429, 500, 502, 503, 504]);

/**
 * Sends the request made by `make` until it succeeds, fails for good, or runs out
 * of attempts. `make` is called for every attempt, so a fresh credential is used
 * each time; it must put the same body (the same event ids) in every one.
 *
 * @returns the successful Response (2xx), its body unread.
 * @throws PulseError for a 4xx other than 429, or once attempts run out.
 */
export async function withRetries(
  r: Retrier,
  fetchFn: typeof fetch,
  make: () => Promise<[string, RequestInit]>,
): Promise<Response> {
  let last: PulseError | undefined;
  for (let attempt = 0; attempt < r.maxAttempts; attempt++) {
    if (attempt > 0) {
      // Retry-After is the server's word on when it can take the request: wait that
      // long, never less; without it, back off with jitter.
      const asked = last?.retryAfterMs;
      if (asked !== undefined && asked > r.maxDelayMs) throw last;
      await r.sleep(asked ?? backoffMs(r, attempt - 1));
    }
    const [url, init] = await make();
    let res: Response;
    try {
      res = await fetchFn(url, init);
    } catch (err) {
      last = new PulseError({ status: 0, code: "network", message: `${init.method ?? "GET"} ${url}: ${String(err)}`, cause: err });
      continue;
    }
    if (res.ok) return res;
    const wait = retryAfterMs(res.headers.get("Retry-After"));
    last = await errorFromResponse(res, wait);
    if (!retryable.has(res.status)) throw last;
  }
  throw last ?? new PulseError({ status: 0, code: "network", message: "no attempt was made" });
}
