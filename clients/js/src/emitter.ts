/** A listener-per-event-name emitter, typed by an event map. */
export class Emitter<Events extends object> {
  #listeners = new Map<keyof Events, Set<(payload: never) => void>>();

  /**
   * Calls `listener` on every `type` event.
   * @returns a function that removes the listener.
   */
  on<K extends keyof Events>(type: K, listener: (payload: Events[K]) => void): () => void {
    let set = this.#listeners.get(type);
    if (!set) this.#listeners.set(type, (set = new Set()));
    set.add(listener as (payload: never) => void);
    return () => set.delete(listener as (payload: never) => void);
  }

  /** The next `type` event's payload. */
  once<K extends keyof Events>(type: K): Promise<Events[K]> {
    return new Promise((resolve) => {
      const off = this.on(type, (p) => {
        off();
        resolve(p);
      });
    });
  }

  protected emit<K extends keyof Events>(type: K, payload: Events[K]): void {
    for (const l of [...(this.#listeners.get(type) ?? [])]) {
      // One listener's exception must not keep the others, or the connection's own
      // bookkeeping, from running: report it asynchronously instead.
      try {
        (l as (p: Events[K]) => void)(payload);
      } catch (err) {
        queueMicrotask(() => {
          throw err;
        });
      }
    }
  }
}
