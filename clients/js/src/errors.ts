import type { components } from "./generated/openapi.js";

/** The `code` of an HTTP error body: stable, meant to be switched on. */
export type ErrorCode = components["schemas"]["Error"]["error"]["code"];

/**
 * A request Pulse refused, or one that could not be made.
 *
 * For an HTTP answer, `status` is its status code and `code`, `message` and `field`
 * come from its JSON body (`{"error":{"code","message","field"?}}`). A request that
 * never got an answer (network error) has `status` 0 and `code` `"network"`.
 */
export class PulseError extends Error {
  override readonly name = "PulseError";
  /** The HTTP status, or 0 when no answer came. */
  readonly status: number;
  /** The server's error code (`forbidden`, `rate_limited`, …), or `network`. */
  readonly code: ErrorCode | "network" | (string & {});
  /** The input field at fault, on a 400. */
  readonly field: string | undefined;
  /** What the server's `Retry-After` asked for, in milliseconds, when it sent one. */
  readonly retryAfterMs: number | undefined;

  constructor(init: { status: number; code: string; message: string; field?: string; retryAfterMs?: number; cause?: unknown }) {
    super(init.message, init.cause === undefined ? undefined : { cause: init.cause });
    this.status = init.status;
    this.code = init.code;
    this.field = init.field;
    this.retryAfterMs = init.retryAfterMs;
  }
}

/**
 * Builds the PulseError of a refused answer from its body. A body that is not
 * Pulse's error shape (a proxy's HTML page, say) still gives an error naming the
 * status, so callers always get a PulseError.
 */
export async function errorFromResponse(res: Response, retryAfterMs?: number): Promise<PulseError> {
  let text = "";
  try {
    text = await res.text();
  } catch {
    // The body could not be read: the status alone will have to do.
  }
  try {
    const body = JSON.parse(text) as { error?: { code?: unknown; message?: unknown; field?: unknown } };
    const e = body.error;
    if (e && typeof e.code === "string" && typeof e.message === "string") {
      return new PulseError({
        status: res.status,
        code: e.code,
        message: e.message,
        ...(typeof e.field === "string" ? { field: e.field } : {}),
        ...(retryAfterMs !== undefined ? { retryAfterMs } : {}),
      });
    }
  } catch {
    // Not JSON: fall through.
  }
  return new PulseError({
    status: res.status,
    code: `http_${res.status}`,
    message: `HTTP ${res.status}${text ? `: ${text.slice(0, 200)}` : ""}`,
    ...(retryAfterMs !== undefined ? { retryAfterMs } : {}),
  });
}
