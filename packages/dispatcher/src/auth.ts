import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { type FairwayConfig, hashApiKey } from '@fairway/core';
import { ApiError } from './errors.ts';
import { bearerToken } from './request-headers.ts';
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
  /** When the key stops authenticating, ms since the epoch. */
  readonly expiresAt: number | undefined;
}

/** What a key is issued for: its tenant, and optionally an app and an SLO class of its own. */
export interface KeyGrant {
  readonly tenant: string;
  readonly app?: string | undefined;
  readonly sloClass?: string | undefined;
  /** When the key stops authenticating, ms since the epoch. @default never */
  readonly expiresAt?: number | undefined;
}

/** A key as operators may see it: its hash (the id to revoke it by) and grant, never the secret. */
export interface KeyInfo {
  /** `sha256:<hex>` of the key. */
  readonly id: string;
  readonly tenant: string;
  readonly app: string | undefined;
  readonly sloClass: string | undefined;
  readonly expiresAt: number | undefined;
}

/** What presenting a key found: its principal, or why it does not authenticate. */
export type KeyCheck =
  | { readonly ok: true; readonly principal: Principal }
  | { readonly ok: false; readonly reason: 'unknown' | 'expired' };

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
      expiresAt: grant.expiresAt,
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

  /**
   * What a presented key is at `nowMs`: its principal, `unknown` (not on the ring, or its tenant
   * is gone) or `expired`.
   */
  check(key: string, nowMs: number): KeyCheck {
    const digest = createHash('sha256').update(key, 'utf8').digest();
    const entry = this.#byHash.get(digest.toString('hex'));
    // The map lookup already matched; the constant-time check guards against a future change of lookup.
    if (!entry || !timingSafeEqual(entry.digest, digest)) return UNKNOWN;
    const tenant = this.#tenants.get(entry.tenant);
    if (tenant === undefined) return UNKNOWN;
    if (entry.expiresAt !== undefined && nowMs >= entry.expiresAt) return EXPIRED;
    return {
      ok: true,
      principal: {
        tenant: tenant.id,
        keyId: `sha256:${entry.digest.toString('hex')}`,
        weight: tenant.weight,
        app: entry.app,
        sloClass: entry.sloClass ?? tenant.sloClass,
      },
    };
  }

  /** The principal for a presented key at `nowMs` (default: no expiry checked), or undefined. */
  authenticate(key: string, nowMs = Number.NEGATIVE_INFINITY): Principal | undefined {
    const c = this.check(key, nowMs);
    return c.ok ? c.principal : undefined;
  }

  /** The keys on the ring, of one tenant or all, ordered by tenant then id; never a secret. */
  list(tenant?: string): KeyInfo[] {
    const out: KeyInfo[] = [];
    for (const [hex, e] of this.#byHash) {
      if (tenant !== undefined && e.tenant !== tenant) continue;
      out.push({
        id: `sha256:${hex}`,
        tenant: e.tenant,
        app: e.app,
        sloClass: e.sloClass,
        expiresAt: e.expiresAt,
      });
    }
    return out.sort((a, b) =>
      a.tenant === b.tenant ? (a.id < b.id ? -1 : 1) : a.tenant < b.tenant ? -1 : 1,
    );
  }

  /** Whether a key (by its hash) is on the ring. */
  holds(hash: string): boolean {
    return this.#byHash.has(hash.slice('sha256:'.length));
  }

  get size(): number {
    return this.#byHash.size;
  }
}

const UNKNOWN: KeyCheck = { ok: false, reason: 'unknown' };
const EXPIRED: KeyCheck = { ok: false, reason: 'expired' };

/**
 * The principal of a request's `Authorization: Bearer <key>` at `nowMs`; throws the 401 a client
 * sees for a missing, unknown or expired key.
 */
export function authenticateRequest(
  keys: KeyRing,
  headers: Record<string, string | string[] | undefined>,
  nowMs: number,
): Principal {
  const key = bearerToken(headers);
  if (key === undefined)
    throw new ApiError('MISSING_API_KEY', 'missing API key: send "Authorization: Bearer <key>"');
  const c = keys.check(key, nowMs);
  if (c.ok) return c.principal;
  throw new ApiError('INVALID_API_KEY', c.reason === 'expired' ? 'API key expired' : 'invalid API key');
}

/** A new API key: `sk-fw-` and 32 random bytes in base64url. */
export function newApiKey(): string {
  return `sk-fw-${randomBytes(32).toString('base64url')}`;
}

/**
 * A check of a shared bearer token (operator or admin token) in constant time: true when the
 * request's `Authorization: Bearer <token>` is `token`.
 */
export function bearerTokenCheck(
  token: string,
): (headers: Record<string, string | string[] | undefined>) => boolean {
  const expected = sha256(token);
  return (headers) => {
    const given = bearerToken(headers);
    return given !== undefined && timingSafeEqual(sha256(given), expected);
  };
}

const sha256 = (s: string): Buffer => createHash('sha256').update(s, 'utf8').digest();

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
