import { ApiError } from '@fairway/dispatcher';

/**
 * A storage limit a request ran into, as the store's scripts report it: which limit, what the
 * tenant uses and what it may use, and for the upload rate when a retry may succeed.
 */
export type StorageRefusal =
  | { readonly limit: 'files' | 'bytes' | 'open_batches'; readonly used: number; readonly max: number }
  | {
      readonly limit: 'upload_rate';
      readonly used: number;
      readonly max: number;
      readonly retryAfterMs: number;
    };

/** Codes the store's scripts return, and the limit each names. */
const SCRIPT_CODES: Record<number, StorageRefusal['limit'] | 'gone'> = {
  [-1]: 'files',
  [-2]: 'bytes',
  [-3]: 'upload_rate',
  [-4]: 'gone',
  [-5]: 'open_batches',
};

/**
 * The refusal a script's `{code, used, limit, retryAfterMs}` reply stands for; undefined when it
 * succeeded, 'gone' when the upload it wrote to was purged or deleted meanwhile.
 */
export function scriptRefusal(reply: readonly number[]): StorageRefusal | 'gone' | undefined {
  const [code = 0, used = 0, max = 0, retryAfterMs = 0] = reply;
  if (code >= 0) return undefined;
  const limit = SCRIPT_CODES[code];
  if (limit === undefined) throw new Error(`batch store: unknown script code ${code}`);
  if (limit === 'gone') return 'gone';
  return limit === 'upload_rate' ? { limit, used, max, retryAfterMs } : { limit, used, max };
}

/** The OpenAI-shaped 429 for a storage refusal; its message names the limit, the usage and the limit. */
export function storageError(tenant: string, r: StorageRefusal, adding = 0): ApiError {
  switch (r.limit) {
    case 'files':
      return new ApiError(
        'STORAGE_QUOTA_EXCEEDED',
        `file count quota reached: tenant ${tenant} holds ${r.used} files, its limit is ${r.max}; delete files or wait for them to expire`,
        { param: 'file' },
      );
    case 'bytes':
      return new ApiError(
        'STORAGE_QUOTA_EXCEEDED',
        `storage quota reached: tenant ${tenant}'s files hold ${r.used} bytes${adding > 0 ? `, this upload adds ${adding}` : ''}, its limit is ${r.max} bytes; delete files or wait for them to expire`,
        { param: 'file' },
      );
    case 'open_batches':
      return new ApiError(
        'STORAGE_QUOTA_EXCEEDED',
        `open batch limit reached: tenant ${tenant} has ${r.used} batches open, its limit is ${r.max}; wait for one to end or cancel one`,
      );
    case 'upload_rate':
      return new ApiError(
        'RPM_LIMITED',
        `upload rate limit reached: tenant ${tenant} made ${r.used} uploads in the last 60 s, its limit is ${r.max} per minute`,
        { retryAfterS: Math.max(1, Math.ceil(r.retryAfterMs / 1000)) },
      );
  }
}

/** The 507 of the memory guard: Redis is too full for new files and batches. */
export function insufficientStorage(usedBytes: number, limitBytes: number, refuseAbove: number): ApiError {
  const pct = (n: number) => `${Math.round(n * 100)}%`;
  return new ApiError(
    'INSUFFICIENT_STORAGE',
    `the gateway's storage is nearly full (${pct(usedBytes / limitBytes)} of ${limitBytes} bytes used; new files and batches are refused above ${pct(refuseAbove)}): try again later`,
    { retryAfterS: 60 },
  );
}
