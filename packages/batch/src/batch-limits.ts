import { type FairwayConfig, storageConfigSchema } from '@fairway/core';

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
export const BATCH_ENDPOINTS = ['/v1/chat/completions', '/v1/completions', '/v1/embeddings'] as const;
/** One of {@link BATCH_ENDPOINTS}. */
export type BatchEndpoint = (typeof BATCH_ENDPOINTS)[number];

/** One tenant's storage limits, resolved from the fleet's `storage` and the tenant's own. */
export interface StorageLimits {
  /** Bytes all of the tenant's files may hold together. */
  readonly maxBytes: number;
  /** Files the tenant may hold at once. */
  readonly maxFiles: number;
  /** Batches the tenant may have open at once. */
  readonly maxOpenBatches: number;
  /** How long a file lives at most, seconds. */
  readonly fileRetentionS: number;
  /** Uploads per minute. */
  readonly uploadsPerMinute: number;
}

/** Storage limits of each tenant: its own `storage`, else the fleet's, the upload rate capped by its RPM. */
export function storageLimitsOf(
  config: Pick<FairwayConfig, 'storage' | 'tenants' | 'defaultLimits'>,
): (tenant: string) => StorageLimits {
  const fleet = config.storage;
  const byTenant = new Map(config.tenants.map((t) => [t.id, t]));
  return (tenant) => {
    const t = byTenant.get(tenant);
    const own = t?.storage ?? {};
    const rpm = t?.limits.rpm ?? config.defaultLimits.rpm;
    const uploads = own.uploadsPerMinute ?? fleet.uploadsPerMinute;
    return {
      maxBytes: own.maxBytes ?? fleet.maxBytes,
      maxFiles: own.maxFiles ?? fleet.maxFiles,
      maxOpenBatches: own.maxOpenBatches ?? fleet.maxOpenBatches,
      fileRetentionS: Math.round((own.fileRetentionDays ?? fleet.fileRetentionDays) * 86_400),
      uploadsPerMinute: rpm === undefined ? uploads : Math.min(uploads, rpm),
    };
  };
}

/** Every tenant's storage limits under the config's defaults (no tenant sets its own). */
export const defaultStorageLimits: (tenant: string) => StorageLimits = storageLimitsOf({
  storage: storageConfigSchema.parse({}),
  tenants: [],
  defaultLimits: {},
});
