import type { WindowHeld, WindowLimit } from '@fairway/store';

/** Where a caller stands under one of its RPM or TPM limits (OpenAI's `x-ratelimit-*` headers). */
export interface RateLimitState {
  /** The limit, requests or tokens per window. */
  readonly limit: number;
  /** What the window still holds room for (0 at a refusal the window has no room for). */
  readonly remaining: number;
  /** Time until the window next has more room, ms. */
  readonly resetMs: number;
}

/** The caller's tightest own request limit and token limit, where it has any. */
export interface RateLimits {
  readonly requests?: RateLimitState;
  readonly tokens?: RateLimitState;
}

const kindOf = (l: WindowLimit): keyof RateLimits | undefined => {
  // Throttles apply only under overload and shared windows are not the caller's own.
  if (l.onlyWhenOverloaded === true || l.shared === true) return undefined;
  if (l.code === 'rpm_limited') return 'requests';
  if (l.code === 'tpm_limited') return 'tokens';
  return undefined;
};

/** The tighter of two states: less room left, then the smaller limit. */
function tighter(a: RateLimitState | undefined, b: RateLimitState): RateLimitState {
  if (a === undefined) return b;
  if (b.remaining !== a.remaining) return b.remaining < a.remaining ? b : a;
  return b.limit < a.limit ? b : a;
}

/**
 * The caller's tightest RPM and TPM limits after an admission, from what the store's admission
 * reported of each window (`AdmitResult.windows`, in `limits` order): no second read of the store.
 */
export function rateLimitsAfter(
  limits: readonly WindowLimit[],
  windows: readonly WindowHeld[],
  nowMs: number,
): RateLimits {
  let requests: RateLimitState | undefined;
  let tokens: RateLimitState | undefined;
  for (const [i, l] of limits.entries()) {
    const kind = kindOf(l);
    const w = windows[i];
    if (kind === undefined || w === undefined) continue;
    const state = {
      limit: l.limit,
      remaining: Math.max(0, Math.floor(l.limit - w.total)),
      resetMs: Math.max(0, w.resetAtMs - nowMs),
    };
    if (kind === 'requests') requests = tighter(requests, state);
    else tokens = tighter(tokens, state);
  }
  return { ...(requests ? { requests } : {}), ...(tokens ? { tokens } : {}) };
}

/**
 * Where the caller stands under the limit that refused it: what the window holds (`held`, unknown
 * for a refusal remembered without the store: none left) and when it has room for the request.
 */
export function rateLimitsAtRefusal(
  limits: readonly WindowLimit[],
  refusal: {
    readonly key: string;
    readonly code: string;
    readonly retryAfterMs: number;
    readonly held?: number;
  },
): RateLimits {
  const l = limits.find((x) => x.key === refusal.key && x.code === refusal.code);
  const kind = l === undefined ? undefined : kindOf(l);
  if (l === undefined || kind === undefined) return {};
  const state = {
    limit: l.limit,
    remaining: refusal.held === undefined ? 0 : Math.max(0, Math.floor(l.limit - refusal.held)),
    resetMs: Math.max(0, refusal.retryAfterMs),
  };
  return { [kind]: state };
}
