/**
 * Pulse's client: post a device's presence, read statuses, watch users change.
 * @packageDocumentation
 */
export { PulseClient, type PulseClientOptions, type FullStatus, type Event } from "./client.js";
export {
  Watch,
  wsBase,
  type Ack,
  type Change,
  type ConnectOptions,
  type CustomStatus,
  type FeedError,
  type Snapshot,
  type Status,
  type UserStatus,
  type WatchEvents,
  type WebSocketConstructor,
  type WebSocketLike,
} from "./watch.js";
export { PulseError, type ErrorCode } from "./errors.js";
export { trackActivity, type ActivitySink, type TrackActivityOptions } from "./activity.js";
export { subjectOf } from "./jwt.js";
export { backoffMs, retryAfterMs, type RetryOptions } from "./retry.js";
export { micros } from "./time.js";
export type { components, paths, operations } from "./generated/openapi.js";
