/**
 * Limits of the Files and Batch API (OpenAI's are 200 MB and 50,000 requests per file; fairway
 * keeps uploads in Redis, so its default file size is smaller).
 */
export interface BatchLimits {
  /** Largest upload, bytes. @default 32 MiB */
  readonly maxFileBytes: number;
  /** Most request lines in one file. @default 50,000 */
  readonly maxLines: number;
  /** Longest `custom_id`, characters. @default 512 */
  readonly maxCustomIdLength: number;
}

/** The default {@link BatchLimits}. */
export const DEFAULT_BATCH_LIMITS: BatchLimits = {
  maxFileBytes: 32 * 1024 * 1024,
  maxLines: 50_000,
  maxCustomIdLength: 512,
};

/** The endpoints a batch may target. */
export const BATCH_ENDPOINTS = ['/v1/chat/completions', '/v1/completions'] as const;
/** One of {@link BATCH_ENDPOINTS}. */
export type BatchEndpoint = (typeof BATCH_ENDPOINTS)[number];
