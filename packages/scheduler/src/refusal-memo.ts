import type { WindowLimit } from '@fairway/policy';
import { tenantScoped } from '@fairway/store';

/** Longest a refusal is answered from memory before the store is asked again, ms. */
const MEMO_MS = 1_000;
/** Most windows remembered at once (a flood of distinct users cannot grow it further). */
const MAX_ENTRIES = 10_000;

interface Memo {
  readonly untilMs: number;
  readonly retryAtMs: number;
  readonly amount: number;
  readonly limit: number;
}

/**
 * A window as the store keeps it, and the pool asking: pools in different slot groups (Redis
 * Cluster) keep a tenant's windows apart, so a refusal in one says nothing of another.
 */
function memoKey(pool: string, tenant: string, l: WindowLimit): string {
  return `${pool}\u0000${tenantScoped(l.shared === true ? '' : tenant, l.key)}`;
}

/**
 * Refusals answered without the store. A request refused by an RPM or TPM window cannot be
 * admitted by that window before its Retry-After — the window only loses entries as time passes
 * (a TPM true-up may free some sooner) — so, for up to a second, a request of the same tenant's
 * window asking as much or more under the same limit is refused here with what remains of that
 * Retry-After. A flood past its own limit then costs the store one call a second per window and
 * dispatcher, not one per request. Throttles (FairServe OIT) are not remembered: their refused
 * arrivals must still be counted in the store.
 */
export class RefusalMemo {
  readonly #memos = new Map<string, Memo>();

  /** The refusal a remembered window gives this request now, if any. */
  refusal(
    pool: string,
    tenant: string,
    limits: readonly WindowLimit[],
    nowMs: number,
  ): { readonly limit: WindowLimit; readonly retryAfterMs: number } | undefined {
    if (this.#memos.size === 0) return undefined;
    for (const l of limits) {
      if (l.code === 'throttled') continue;
      const key = memoKey(pool, tenant, l);
      const m = this.#memos.get(key);
      if (m === undefined) continue;
      if (nowMs >= m.untilMs) {
        this.#memos.delete(key);
        continue;
      }
      if (l.amount >= m.amount && l.limit <= m.limit)
        return { limit: l, retryAfterMs: Math.max(0, m.retryAtMs - nowMs) };
    }
    return undefined;
  }

  /** Remembers the store's refusal of `tenant`'s request by the window `key`. */
  remember(
    pool: string,
    tenant: string,
    limits: readonly WindowLimit[],
    key: string,
    retryAfterMs: number,
    nowMs: number,
  ): void {
    const l = limits.find((w) => w.key === key && w.code !== 'throttled');
    if (l === undefined) return;
    if (this.#memos.size >= MAX_ENTRIES) {
      for (const [k, m] of this.#memos) if (nowMs >= m.untilMs) this.#memos.delete(k);
      if (this.#memos.size >= MAX_ENTRIES) return;
    }
    this.#memos.set(memoKey(pool, tenant, l), {
      untilMs: nowMs + Math.min(MEMO_MS, retryAfterMs),
      retryAtMs: nowMs + retryAfterMs,
      amount: l.amount,
      limit: l.limit,
    });
  }
}
