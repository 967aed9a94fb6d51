import { createHash, timingSafeEqual } from 'node:crypto';
import { type FairwayConfig, hashApiKey } from '@fairway/core';
import type { TenantDirectory } from './tenant-directory.ts';

/** Who a request authenticates as. */
export interface Principal {
  readonly tenant: string;
  /** The key's id, `sha256:<hex>` (usage accounting and key budgets). */
  readonly keyId?: string | undefined;
  readonly weight: number;
  /** App bound to the key, if any; else taken from `x-fairway-app`. */
  readonly app: string | undefined;
  /** Default SLO class for the key (or tenant), if any. */
  readonly sloClass: string | undefined;
}

/** `sha256:<hex>` of an API key (defined in core, beside the config that checks keys). */
export { hashApiKey };

interface Entry {
  readonly digest: Buffer;
  readonly tenant: string;
  /** App the key is bound to, if any. */
  readonly app: string | undefined;
  /** SLO class the key itself names; else the tenant's applies. */
  readonly sloClass: string | undefined;
}

/** What a key is issued for: its tenant, and optionally an app and an SLO class of its own. */
export interface KeyGrant {
  readonly tenant: string;
  readonly app?: string | undefined;
  readonly sloClass?: string | undefined;
}

/**
 * API keys → principals. Keys are held only as SHA-256 digests; a lookup hashes the presented key
 * and compares digests in constant time, so neither timing nor memory reveals a key. A key's
 * tenant is looked up in the {@link TenantDirectory} on every request, so a weight or SLO class
 * changed by an admin event applies at once, and keys of a tenant that no longer exists fail.
 */
export class KeyRing {
  readonly #byHash = new Map<string, Entry>();
  readonly #tenants: TenantDirectory;

  constructor(tenants: TenantDirectory) {
    this.#tenants = tenants;
  }

  /** The tenant a key (by its hash) belongs to, if it is on the ring. */
  ownerOf(hash: string): string | undefined {
    return this.#byHash.get(hash.slice('sha256:'.length))?.tenant;
  }

  /** Adds (or re-issues) a key by its stored hash (`sha256:<hex>`). */
  add(hash: string, grant: KeyGrant): void {
    const hex = hash.slice('sha256:'.length);
    this.#byHash.set(hex, {
      digest: Buffer.from(hex, 'hex'),
      tenant: grant.tenant,
      app: grant.app,
      sloClass: grant.sloClass,
    });
  }

  /** Revokes a key by its hash; true if it was present. */
  revoke(hash: string): boolean {
    return this.#byHash.delete(hash.slice('sha256:'.length));
  }

  /** Revokes every key of a tenant; returns how many. */
  revokeTenant(tenant: string): number {
    let n = 0;
    for (const [hex, e] of this.#byHash) {
      if (e.tenant !== tenant) continue;
      this.#byHash.delete(hex);
      n++;
    }
    return n;
  }

  /** The principal for a presented key, or undefined. */
  authenticate(key: string): Principal | undefined {
    const digest = createHash('sha256').update(key, 'utf8').digest();
    const entry = this.#byHash.get(digest.toString('hex'));
    if (!entry) return undefined;
    // The map lookup already matched; the constant-time check guards against a future change of lookup.
    if (!timingSafeEqual(entry.digest, digest)) return undefined;
    const tenant = this.#tenants.get(entry.tenant);
    if (tenant === undefined) return undefined;
    return {
      tenant: tenant.id,
      keyId: `sha256:${entry.digest.toString('hex')}`,
      weight: tenant.weight,
      app: entry.app,
      sloClass: entry.sloClass ?? tenant.sloClass,
    };
  }

  get size(): number {
    return this.#byHash.size;
  }
}

/**
 * The key ring of a config file: every tenant's keys, stored by hash (plain demo keys are hashed
 * here and not kept). A key's app defaults to none and its SLO class to its tenant's.
 */
export function keyRingFromConfig(config: FairwayConfig, tenants: TenantDirectory): KeyRing {
  const ring = new KeyRing(tenants);
  for (const t of config.tenants) {
    for (const k of t.keys)
      ring.add(k.hash ?? hashApiKey(k.key ?? ''), { tenant: t.id, app: k.app, sloClass: k.sloClass });
  }
  return ring;
}
