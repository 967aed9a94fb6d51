import { EngineTimeoutError } from '@fairway/engine';

/** Health checks in a row an engine leaves unanswered before it counts as hung. */
export const HUNG_AFTER_CHECKS = 2;

/** Options of {@link HungEngines}. */
export interface HungEnginesOptions {
  /** Whether the engine at `url` answers its health check within `timeoutMs`. */
  readonly answers: (url: string) => Promise<boolean>;
  /** How long one health check may take, ms (named in the error the calls fail with). */
  readonly timeoutMs: number;
}

/**
 * Tells which engines stopped answering altogether — a process frozen, a host cut off — among
 * those holding calls that would otherwise wait out their timeouts (a whole answer's is
 * `engineTimeouts.answerMs`, 600 s). The dispatcher asks it, on each probe round, about the
 * replicas it has not heard from (heartbeats stopped, or held out after a failure) that hold its
 * requests with nothing sent to their clients; an engine that leaves {@link HUNG_AFTER_CHECKS}
 * health checks in a row unanswered is reported hung, with the `EngineTimeoutError` (phase `hung`)
 * its calls fail with. An engine that answers — its agent died, or the bus lost its agent — is
 * not, and its count starts again; so does that of a replica heard from again.
 */
export class HungEngines {
  readonly #o: HungEnginesOptions;
  /** Unanswered health checks in a row, by replica id. */
  readonly #unanswered = new Map<string, number>();
  /** Replica ids with a check under way (one at a time per replica). */
  readonly #checking = new Set<string>();

  constructor(options: HungEnginesOptions) {
    this.#o = options;
  }

  /**
   * Checks the engine of each replica in `unheard` (replica id → engine URL) and calls `hung` for
   * each found hung; forgets the count of every replica not in it. Resolves once the checks are
   * done (a caller on a timer need not wait: a replica is checked once at a time).
   */
  check(
    unheard: ReadonlyMap<string, string>,
    hung: (replicaId: string, err: EngineTimeoutError) => void,
  ): Promise<void> {
    for (const id of this.#unanswered.keys()) if (!unheard.has(id)) this.#unanswered.delete(id);
    const checks: Promise<void>[] = [];
    for (const [id, url] of unheard) {
      if (this.#checking.has(id)) continue;
      this.#checking.add(id);
      checks.push(this.#checkOne(id, url, hung).finally(() => this.#checking.delete(id)));
    }
    return Promise.all(checks).then(() => undefined);
  }

  async #checkOne(
    id: string,
    url: string,
    hung: (replicaId: string, err: EngineTimeoutError) => void,
  ): Promise<void> {
    if (await this.#o.answers(url).catch(() => false)) {
      this.#unanswered.delete(id);
      return;
    }
    const unanswered = (this.#unanswered.get(id) ?? 0) + 1;
    if (unanswered < HUNG_AFTER_CHECKS) {
      this.#unanswered.set(id, unanswered);
      return;
    }
    this.#unanswered.delete(id);
    hung(id, new EngineTimeoutError(url, 'GET /health', 'hung', this.#o.timeoutMs));
  }
}
