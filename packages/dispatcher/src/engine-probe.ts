import type { VllmMetrics } from '@fairway/engine';
import type { EnginePool } from './engine-pool.ts';

/**
 * Asks replicas' engines directly, not through their agents: whether a suspect engine answers
 * again (`GET /health`), and what load an engine carries (`GET /metrics`) while the bus is down
 * and heartbeats cannot arrive. Uses the dispatcher's engine clients (their keep-alive pools);
 * every call is bounded by `timeoutMs`, so a stopped engine cannot hold a probe round.
 */
export class EngineProbe {
  readonly #engines: EnginePool;
  readonly #urlOf: (replicaId: string) => string | undefined;
  readonly #timeoutMs: number;

  /**
   * @param urlOf the engine URL of a registered replica
   * @param timeoutMs how long one probe may take, ms
   */
  constructor(engines: EnginePool, urlOf: (replicaId: string) => string | undefined, timeoutMs: number) {
    this.#engines = engines;
    this.#urlOf = urlOf;
    this.#timeoutMs = timeoutMs;
  }

  /** Whether the replica's engine answers its health check now. */
  async health(replicaId: string): Promise<boolean> {
    const url = this.#urlOf(replicaId);
    return url !== undefined && (await this.answers(url));
  }

  /** Whether the engine at `url` answers its health check now. */
  async answers(url: string): Promise<boolean> {
    return (await this.#bounded(this.#engines.get(url).health())) !== undefined;
  }

  /** The replica's engine metrics now; undefined if it did not answer. */
  async metrics(replicaId: string): Promise<VllmMetrics | undefined> {
    const url = this.#urlOf(replicaId);
    if (url === undefined) return undefined;
    const m = await this.#bounded(this.#engines.get(url).metrics());
    return m === undefined ? undefined : m.value;
  }

  /** `{ value }` when `p` resolved within the timeout, undefined when it failed or took too long. */
  async #bounded<T>(p: Promise<T>): Promise<{ value: T } | undefined> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<undefined>((r) => {
      timer = setTimeout(() => r(undefined), this.#timeoutMs);
      timer.unref();
    });
    try {
      return await Promise.race([p.then((value) => ({ value })), late]);
    } catch {
      return undefined;
    } finally {
      clearTimeout(timer);
    }
  }
}
