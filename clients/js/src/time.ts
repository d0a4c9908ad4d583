/**
 * An RFC 3339 time as microseconds since the epoch, the precision Pulse writes
 * (`2026-11-22T07:20:03.123456Z`); Date alone would drop the last three digits and
 * make two changes of the same millisecond look equal. NaN when it does not parse.
 */
export function micros(t: string): number {
  const m = /^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$/i.exec(t);
  if (!m) return Number.NaN;
  const ms = Date.parse(`${m[1]}${m[3]}`);
  const frac = (m[2] ?? "").slice(0, 6).padEnd(6, "0");
  return ms * 1000 + Number(frac);
}
