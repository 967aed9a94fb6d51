import type { ModelPrice, QuotasConfig, RequestDescriptor } from '@fairway/core';
import type { QuotaCheck, UsageAccount } from '@fairway/store';

const DAY_MS = 86_400_000;

/** Fraction of a budget at which its alert is raised, when `quotas.alertAt` says nothing. */
export const DEFAULT_ALERT_AT = 0.8;

/** The UTC day (`YYYY-MM-DD`) of a time in ms. */
export function utcDay(ms: number): string {
  return new Date(ms).toISOString().slice(0, 10);
}

/** The UTC day and month buckets of a time and when each ends (ms). */
export interface UsageWindows {
  readonly day: string;
  readonly month: string;
  readonly dayEndMs: number;
  readonly monthEndMs: number;
}

/** The last day's windows: every request of a day shares them (no date formatting per request). */
let lastWindows: (UsageWindows & { readonly dayIndex: number }) | undefined;

/** The UTC day and month buckets of `nowMs` and when each ends (ms). */
export function usageWindows(nowMs: number): UsageWindows {
  const dayIndex = Math.floor(nowMs / DAY_MS);
  if (lastWindows?.dayIndex === dayIndex) return lastWindows;
  const d = new Date(nowMs);
  const day = utcDay(nowMs);
  lastWindows = {
    dayIndex,
    day,
    month: day.slice(0, 7),
    dayEndMs: (dayIndex + 1) * DAY_MS,
    monthEndMs: Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1),
  };
  return lastWindows;
}

/** Every UTC day from `from` to `to` (inclusive, `YYYY-MM-DD`), or undefined if more than `max`. */
export function daysBetween(from: string, to: string, max = 400): string[] | undefined {
  const start = Date.parse(`${from}T00:00:00Z`);
  const end = Date.parse(`${to}T00:00:00Z`);
  if (Number.isNaN(start) || Number.isNaN(end) || end < start) return [];
  const n = (end - start) / DAY_MS + 1;
  if (n > max) return undefined;
  return Array.from({ length: n }, (_, i) => utcDay(start + i * DAY_MS));
}

/** Cost of tokens at a model's prices (per 1M tokens), as the store computes it at settle. */
export function costOf(price: ModelPrice | undefined, input: number, output: number): number {
  return price === undefined ? 0 : (input * price.input + output * price.output) / 1_000_000;
}

/** What {@link usageAdmission} needs to know of the fleet's configuration. */
export interface QuotaSources {
  /** Prices of a model, if configured. */
  priceOf(model: string): ModelPrice | undefined;
  /** A tenant's budgets (its own, else the default), if any. */
  tenantQuotas(tenant: string): QuotasConfig | undefined;
  /** A key's own budgets, if any. */
  keyQuotas(keyId: string): QuotasConfig | undefined;
}

/** What a request reserves against budgets: the amount, and the least it may reserve (if less). */
interface Reserve {
  readonly tokens: number;
  readonly spend: number;
  /** The least (tokens and spend) of a request whose engine cap the budget may lower. */
  readonly least?: { readonly tokens: number; readonly spend: number };
}

function checksOf(
  scope: QuotaCheck['scope'],
  q: QuotasConfig | undefined,
  r: Reserve,
  w: UsageWindows,
): QuotaCheck[] {
  if (q === undefined) return [];
  const alert = q.alertAt ?? DEFAULT_ALERT_AT;
  const out: QuotaCheck[] = [];
  const add = (window: 'day' | 'month', kind: 'tokens' | 'spend', budget: number | undefined): void => {
    if (budget === undefined) return;
    out.push({
      scope,
      window,
      kind,
      budget,
      amount: kind === 'tokens' ? r.tokens : r.spend,
      ...(r.least === undefined ? {} : { minAmount: kind === 'tokens' ? r.least.tokens : r.least.spend }),
      alertAt: budget * alert,
      resetAtMs: window === 'day' ? w.dayEndMs : w.monthEndMs,
    });
  };
  add('day', 'tokens', q.tokensPerDay);
  add('month', 'tokens', q.tokensPerMonth);
  add('day', 'spend', q.spendPerDay);
  add('month', 'spend', q.spendPerMonth);
  return out;
}

/**
 * A request's usage account and the budgets it is admitted under: its tenant's and its key's,
 * each reserving the request's estimated tokens (`reservedTokens`: prompt + output cap, as the
 * TPM limits reserve) or their cost, in the UTC day and month of `nowMs`. A request without an
 * output cap (`outputCap`) reserves its prompt and the whole engine cap, down to one token per
 * choice: what the budgets hold (the store's `quotaShare`) becomes its engine cap
 * ({@link grantedOutput}), so it can never use more than its budgets had left.
 */
export function usageAdmission(
  sources: QuotaSources,
  req: RequestDescriptor,
  nowMs: number,
  reservedTokens: number,
): { usage: UsageAccount; quotas: QuotaCheck[] } {
  const w = usageWindows(nowMs);
  const price = sources.priceOf(req.model);
  const usage: UsageAccount = {
    model: req.model,
    day: w.day,
    month: w.month,
    ...(req.keyId !== undefined ? { key: req.keyId } : {}),
    ...(price !== undefined ? { priceIn: price.input, priceOut: price.output } : {}),
  };
  let r: Reserve;
  if (req.outputCap === undefined) {
    const output = Math.max(0, reservedTokens - req.inputTokens);
    r = { tokens: reservedTokens, spend: costOf(price, Math.min(req.inputTokens, reservedTokens), output) };
  } else {
    // The budget's last tokens go to this request's output, so its prompt, an estimate until the
    // engine counts it, is reserved with a margin: a prompt counted short must not overshoot.
    const input = promptWithMargin(req.inputTokens);
    const least = req.choices ?? 1;
    r = {
      tokens: input + req.outputCap,
      spend: costOf(price, input, req.outputCap),
      least: { tokens: input + least, spend: costOf(price, input, least) },
    };
  }
  const quotas = [
    ...checksOf('tenant', sources.tenantQuotas(req.tenant), r, w),
    ...(req.keyId === undefined ? [] : checksOf('key', sources.keyQuotas(req.keyId), r, w)),
  ];
  return { usage, quotas };
}

/** A prompt's estimated tokens and a margin for the estimate's error (10 % and one token). */
export function promptWithMargin(inputTokens: number): number {
  return Math.ceil(inputTokens * 1.1) + 1;
}

/**
 * The output tokens per choice the engine may generate for a request without an output cap,
 * admitted with quota share `share` (undefined: no budget applied, the whole cap): one token per
 * choice plus the share of the rest of the cap, so every choice together stays within what the
 * budgets reserved.
 */
export function grantedOutput(req: RequestDescriptor, share: number | undefined): number | undefined {
  if (req.outputCap === undefined) return undefined;
  const choices = req.choices ?? 1;
  if (share === undefined) return Math.floor(req.outputCap / choices);
  const total = choices + Math.floor(share * (req.outputCap - choices));
  return Math.max(1, Math.floor(total / choices));
}
