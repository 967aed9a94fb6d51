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
  /** Hash: a file's metadata (tenant, name, purpose, bytes, created_at, expires_at, status). */
  file(id: string): string {
    return `${this.base}:file:${id}`;
  }
  /** List: a file's content in pieces, in order (written as an upload arrives). */
  fileChunks(id: string): string {
    return `${this.base}:file:${id}:chunks`;
  }
  /** String: a file's content as earlier versions stored it whole (read, and deleted, still). */
  fileContent(id: string): string {
    return `${this.base}:file:${id}:content`;
  }
  /** Sorted set: a tenant's file ids by creation time (ms). */
  tenantFiles(tenant: string): string {
    return `${this.base}:tenant:${tenant}:files`;
  }
  /** Sorted set: a tenant's file ids by expiry (ms; an unfinished upload's by its deadline). */
  tenantFileExpiry(tenant: string): string {
    return `${this.base}:tenant:${tenant}:file-expiry`;
  }
  /** Hash: the bytes a tenant's files hold (`bytes`) and each file's (by id). */
  tenantStorage(tenant: string): string {
    return `${this.base}:tenant:${tenant}:storage`;
  }
  /** Sorted set: a tenant's recent uploads by time (ms), its upload-rate window. */
  tenantUploads(tenant: string): string {
    return `${this.base}:tenant:${tenant}:uploads`;
  }
  /** Set: a tenant's batches that may still be open (ended ones leave it at the next creation). */
  tenantOpenBatches(tenant: string): string {
    return `${this.base}:tenant:${tenant}:open-batches`;
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
