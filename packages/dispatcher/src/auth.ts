import { createHash, timingSafeEqual } from 'node:crypto';
import type { FairwayConfig } from '@fairway/core';

/** Who a request authenticates as. */
export interface Principal {
  readonly tenant: string;
  readonly weight: number;
  /** App bound to the key, if any; else taken from `x-fairway-app`. */
  readonly app: string | undefined;
  /** Default SLO class for the key (or tenant), if any. */
  readonly sloClass: string | undefined;
}

/** `sha256:<hex>` of an API key, the only form in which keys are stored. */
export function hashApiKey(key: string): string {
  return `sha256:${createHash('sha256').update(key, 'utf8').digest('hex')}`;
}

interface Entry {
  readonly digest: Buffer;
  readonly principal: Principal;
}

/**
 * API keys → principals. Keys are held only as SHA-256 digests; a lookup hashes the presented key
 * and compares digests in constant time, so neither timing nor memory reveals a key.
 */
export class KeyRing {
  readonly #byHash = new Map<string, Entry>();

  /** Adds a key by its stored hash (`sha256:<hex>`). */
  add(hash: string, principal: Principal): void {
    const hex = hash.slice('sha256:'.length);
    this.#byHash.set(hex, { digest: Buffer.from(hex, 'hex'), principal });
  }

  /** Revokes a key by its hash; true if it was present. */
  revoke(hash: string): boolean {
    return this.#byHash.delete(hash.slice('sha256:'.length));
  }

  /** The principal for a presented key, or undefined. */
  authenticate(key: string): Principal | undefined {
    const digest = createHash('sha256').update(key, 'utf8').digest();
    const entry = this.#byHash.get(digest.toString('hex'));
    if (!entry) return undefined;
    // The map lookup already matched; the constant-time check guards against a future change of lookup.
    return timingSafeEqual(entry.digest, digest) ? entry.principal : undefined;
  }

  get size(): number {
    return this.#byHash.size;
  }
}

/**
 * The key ring of a config file: every tenant's keys, stored by hash (plain demo keys are hashed
 * here and not kept). A key's app and SLO class default to none and to the tenant's class.
 */
export function keyRingFromConfig(config: FairwayConfig): KeyRing {
  const ring = new KeyRing();
  for (const t of config.tenants) {
    for (const k of t.keys) {
      const hash = k.hash ?? hashApiKey(k.key ?? '');
      ring.add(hash, { tenant: t.id, weight: t.weight, app: k.app, sloClass: k.sloClass ?? t.sloClass });
    }
  }
  return ring;
}
