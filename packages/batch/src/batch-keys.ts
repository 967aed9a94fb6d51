/**
 * Every Redis key of the Files and Batch API, under the fleet's prefix in one hash slot
 * (`{prefix}:batch:…`, like the store's keys), and the BullMQ prefix of its jobs.
 */
export class BatchKeys {
  readonly base: string;

  constructor(prefix: string) {
    this.base = `{${prefix}}:batch`;
  }

  /** BullMQ's key prefix: its keys share the slot (`{prefix}:batch:bull:<queue>:…`). */
  get bullPrefix(): string {
    return `${this.base}:bull`;
  }
  /** Hash: a file's metadata (tenant, name, purpose, bytes, created_at). */
  file(id: string): string {
    return `${this.base}:file:${id}`;
  }
  /** String: a file's content. */
  fileContent(id: string): string {
    return `${this.base}:file:${id}:content`;
  }
  /** Sorted set: a tenant's file ids by creation time (ms). */
  tenantFiles(tenant: string): string {
    return `${this.base}:tenant:${tenant}:files`;
  }
  /** Hash: a batch's fields, timestamps and request counters. */
  batch(id: string): string {
    return `${this.base}:batch:${id}`;
  }
  /** Hash: a batch's request lines by index (JSON). */
  lines(id: string): string {
    return `${this.base}:batch:${id}:lines`;
  }
  /** Hash: a batch's recorded outcomes by line index (JSON; each line once). */
  results(id: string): string {
    return `${this.base}:batch:${id}:results`;
  }
  /** Sorted set: a tenant's batch ids by creation time (ms). */
  tenantBatches(tenant: string): string {
    return `${this.base}:tenant:${tenant}:batches`;
  }
}
