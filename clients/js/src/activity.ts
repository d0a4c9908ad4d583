/** Anything that can report a device's activity: a PulseClient, or a present Watch. */
export interface ActivitySink {
  setStatus(status: "idle"): Promise<unknown>;
  activity(): Promise<unknown>;
}

/** trackActivity's options. */
export interface TrackActivityOptions {
  /** Input-less time after which the device is set idle (default 5 minutes). */
  idleAfterMs?: number;
  /**
   * How long the page may stay hidden (another tab, the window minimised) before the
   * device is set idle (default 0: at once).
   */
  hiddenIdleAfterMs?: number;
  /** At most one activity event per this many ms while the user keeps busy (default 30 s). */
  throttleMs?: number;
  /** Where a failed send goes (default: dropped; the next input tries again). */
  onError?: (err: unknown) => void;
}

/** The input events that count as the user doing something. */
const inputEvents = ["pointerdown", "pointermove", "keydown", "wheel", "touchstart", "scroll"] as const;

/**
 * Maps what the page sees onto presence: the page hidden (another tab, the window
 * minimised) for `hiddenIdleAfterMs` or no input for `idleAfterMs` sets the device idle; input sets it back
 * online with an `activity` event, at most one per `throttleMs`. Outside a browser
 * (no `document`) it does nothing.
 *
 * Stop it while the user has chosen `invisible` or `offline`: activity makes the
 * device online.
 *
 * @returns a function that stops tracking.
 */
export function trackActivity(sink: ActivitySink, opts: TrackActivityOptions = {}): () => void {
  const doc = (globalThis as { document?: Document }).document;
  const win = (globalThis as { window?: Window }).window;
  if (!doc || !win) return () => {};
  const idleAfterMs = opts.idleAfterMs ?? 5 * 60_000;
  const hiddenIdleAfterMs = opts.hiddenIdleAfterMs ?? 0;
  const throttleMs = opts.throttleMs ?? 30_000;
  const report = (p: Promise<unknown>) => p.catch((err) => opts.onError?.(err));

  let idle = false;
  let lastSent = Number.NEGATIVE_INFINITY;
  let timer: ReturnType<typeof setTimeout> | undefined;

  const goIdle = () => {
    clearTimeout(timer);
    if (idle) return;
    idle = true;
    report(sink.setStatus("idle"));
  };
  const active = () => {
    clearTimeout(timer);
    timer = setTimeout(goIdle, idleAfterMs);
    const now = Date.now();
    // Coming back from idle is news at once; staying busy needs only a sign of life.
    if (idle || now - lastSent >= throttleMs) {
      idle = false;
      lastSent = now;
      report(sink.activity());
    }
  };
  const hidden = () => {
    clearTimeout(timer);
    if (hiddenIdleAfterMs <= 0) goIdle();
    else timer = setTimeout(goIdle, hiddenIdleAfterMs);
  };
  const visibility = () => (doc.visibilityState === "hidden" ? hidden() : active());

  for (const type of inputEvents) win.addEventListener(type, active, { passive: true });
  doc.addEventListener("visibilitychange", visibility);
  if (doc.visibilityState === "hidden") hidden();
  else active();

  return () => {
    clearTimeout(timer);
    for (const type of inputEvents) win.removeEventListener(type, active);
    doc.removeEventListener("visibilitychange", visibility);
  };
}
