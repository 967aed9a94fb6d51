import type { Rng } from '@fairway/core';
import { z } from 'zod';

const fraction = z.number().min(0).max(1);
const nonNegInt = z.number().int().nonnegative();

/**
 * Faults the simulated engine injects for reliability tests. Rates are per generation request and
 * drawn from the engine's seeded RNG, so a seed replays the same faulty requests.
 */
export const faultConfigSchema = z
  .object({
    /** Startup delay: `/health` and generation answer 503 for this long after start, ms. */
    slowStartMs: nonNegInt.default(0),
    /** Delay before a generation request is admitted and its response headers sent, ms. */
    headersDelayMs: nonNegInt.default(0),
    /** Fraction of generation requests answered with HTTP 500 at once. */
    errorRate: fraction.default(0),
    /** Fraction of generation requests whose connection is destroyed mid-response. */
    dropRate: fraction.default(0),
    /** Output tokens sent before a dropped connection is destroyed. */
    dropAfterTokens: nonNegInt.default(1),
    /** Fraction of generation requests whose response stops (connection left open) mid-stream. */
    hangRate: fraction.default(0),
    /** Output tokens sent before a hanging response goes silent. */
    hangAfterTokens: nonNegInt.default(1),
    /**
     * The engine loop takes no step (a stuck engine core, e.g. a hung collective): requests wait
     * and their token counters stand still, while `/health` and `/metrics` answer as before.
     */
    stalled: z.boolean().default(false),
  })
  .strict();

/** Fault configuration (all faults off by default). */
export type FaultConfig = z.infer<typeof faultConfigSchema>;

/** A partial update of the fault configuration, as `POST /fairway/faults` accepts it. */
export const faultPatchSchema = faultConfigSchema.partial().strict();

/** What happens to one generation request. */
export type FaultPlan =
  | { readonly kind: 'none' }
  | { readonly kind: 'error' }
  /** Destroy the connection once `afterTokens` tokens were generated. */
  | { readonly kind: 'drop'; readonly afterTokens: number }
  /** Stop writing once `afterTokens` tokens were sent; never end the response. */
  | { readonly kind: 'hang'; readonly afterTokens: number };

const NONE: FaultPlan = { kind: 'none' };

/** Decides, per request, which fault (if any) it suffers. */
export class FaultInjector {
  #config: FaultConfig;
  readonly #rng: Rng;

  constructor(config: FaultConfig, rng: Rng) {
    this.#config = config;
    this.#rng = rng;
  }

  /** The current configuration. */
  get config(): FaultConfig {
    return this.#config;
  }

  /** Replaces fields of the configuration (already validated). */
  update(patch: Partial<FaultConfig>): FaultConfig {
    this.#config = { ...this.#config, ...patch };
    return this.#config;
  }

  /** Draws the fault of the next generation request: error, then drop, then hang, by their rates. */
  plan(): FaultPlan {
    const c = this.#config;
    if (c.errorRate === 0 && c.dropRate === 0 && c.hangRate === 0) return NONE;
    const u = this.#rng.next();
    if (u < c.errorRate) return { kind: 'error' };
    if (u < c.errorRate + c.dropRate) return { kind: 'drop', afterTokens: c.dropAfterTokens };
    if (u < c.errorRate + c.dropRate + c.hangRate) return { kind: 'hang', afterTokens: c.hangAfterTokens };
    return NONE;
  }
}
