import type { Engine } from '@fairway/engine';

/** Makes the client of one engine from its base URL (a `VllmClient` in production). */
export type EngineFactory = (url: string) => Engine;

/**
 * One engine client per replica URL, made on first use and kept for its keep-alive connection
 * pool, so proxying a request never opens a connection the previous one could have reused.
 */
export class EnginePool {
  readonly #factory: EngineFactory;
  readonly #engines = new Map<string, Engine>();

  constructor(factory: EngineFactory) {
    this.#factory = factory;
  }

  /** The client of the engine at `url`. */
  get(url: string): Engine {
    let e = this.#engines.get(url);
    if (e === undefined) {
      e = this.#factory(url);
      this.#engines.set(url, e);
    }
    return e;
  }

  /** Closes every client's connections. */
  async close(): Promise<void> {
    const all = [...this.#engines.values()];
    this.#engines.clear();
    await Promise.allSettled(all.map((e) => e.close()));
  }
}
