import { type FairwayConfig, hashApiKey, type LimitsConfig, type QuotasConfig } from '@fairway/core';

/** A tenant as the dispatcher serves it now: the config file's entry with admin changes applied. */
export interface TenantEntry {
  readonly id: string;
  /** Weight of its share (weighted VTC). */
  readonly weight: number;
  /** SLO class of its keys that name none. */
  readonly sloClass: string | undefined;
  /** Its own limits; empty means the default limits apply. */
  readonly limits: LimitsConfig;
  /** What every key of the tenant may choose or send beyond its class (config `sloClasses`, `engineFields`). */
  readonly grants?: Grants | undefined;
}

/**
 * What a key or tenant is granted beyond its own SLO class: further classes it may choose per
 * request, and restricted engine fields it may send.
 */
export interface Grants {
  readonly sloClasses?: ReadonlySet<string> | undefined;
  readonly engineFields?: ReadonlySet<string> | undefined;
}

/** The grants a config entry names, or undefined when it names none. */
export function grantsOf(c: {
  sloClasses?: readonly string[];
  engineFields?: readonly string[];
}): Grants | undefined {
  if (c.sloClasses === undefined && c.engineFields === undefined) return undefined;
  return {
    sloClasses: c.sloClasses === undefined ? undefined : new Set(c.sloClasses),
    engineFields: c.engineFields === undefined ? undefined : new Set(c.engineFields),
  };
}

/** A quotas scope an operator can set (admin event `quotaSet`). */
export type QuotaScope = 'tenant' | 'key' | 'default';

function hasQuotas(q: QuotasConfig | undefined): q is QuotasConfig {
  return (
    q !== undefined &&
    (q.tokensPerDay !== undefined ||
      q.tokensPerMonth !== undefined ||
      q.spendPerDay !== undefined ||
      q.spendPerMonth !== undefined)
  );
}

/** A limits scope an operator can set (admin event `limitsSet`). */
export type LimitsScope = 'tenant' | 'app' | 'user' | 'default';

function hasLimits(l: LimitsConfig | undefined): l is LimitsConfig {
  return l !== undefined && (l.rpm !== undefined || l.tpm !== undefined || l.maxQueued !== undefined);
}

/**
 * The tenants, their weights and every scope's limits, starting from the config file and changed
 * live by admin events. Admission and ordering read it on every request, so a change applies to
 * the next request; it is the only place the dispatcher keeps them.
 */
export class TenantDirectory {
  readonly #tenants = new Map<string, TenantEntry>();
  readonly #apps = new Map<string, LimitsConfig>();
  /** Apps' own OIT limits (`apps[].oitRpm`). */
  readonly #appOit = new Map<string, number>();
  readonly #users = new Map<string, LimitsConfig>();
  #defaults: LimitsConfig;
  readonly #tenantQuotas = new Map<string, QuotasConfig>();
  readonly #keyQuotas = new Map<string, QuotasConfig>();
  #defaultQuotas: QuotasConfig | undefined;

  constructor(defaults: LimitsConfig = {}) {
    this.#defaults = defaults;
  }

  /** The directory of a config file: its tenants, apps with limits and default limits. */
  static fromConfig(config: FairwayConfig): TenantDirectory {
    const d = new TenantDirectory(config.defaultLimits);
    for (const t of config.tenants)
      d.upsertTenant({
        id: t.id,
        weight: t.weight,
        sloClass: t.sloClass,
        limits: t.limits,
        grants: grantsOf(t),
      });
    for (const a of config.apps) {
      if (hasLimits(a.limits)) d.setLimits('app', a.id, a.limits);
      if (a.oitRpm !== undefined) d.#appOit.set(a.id, a.oitRpm);
    }
    if (config.defaultQuotas !== undefined) d.setQuotas('default', undefined, config.defaultQuotas);
    for (const t of config.tenants) {
      if (t.quotas !== undefined) d.setQuotas('tenant', t.id, t.quotas);
      for (const k of t.keys)
        if (k.quotas !== undefined) d.setQuotas('key', k.hash ?? hashApiKey(k.key ?? ''), k.quotas);
    }
    return d;
  }

  /** Whether `tenant` exists (keys of unknown tenants are refused). */
  has(tenant: string): boolean {
    return this.#tenants.has(tenant);
  }

  /** The tenant's entry, if it exists. */
  get(tenant: string): TenantEntry | undefined {
    return this.#tenants.get(tenant);
  }

  /** Ids of every tenant, in the order they were added. */
  ids(): string[] {
    return [...this.#tenants.keys()];
  }

  /** The tenant's weight; 1 for a tenant that no longer exists (its queued requests still drain). */
  weightOf(tenant: string): number {
    return this.#tenants.get(tenant)?.weight ?? 1;
  }

  /** Limits of a tenant: its own if it has any, else the default limits. */
  tenantLimits(tenant: string): LimitsConfig {
    const own = this.#tenants.get(tenant)?.limits;
    return hasLimits(own) ? own : this.#defaults;
  }

  /** Limits of an app, if it has any. */
  appLimits(app: string): LimitsConfig | undefined {
    return this.#apps.get(app);
  }

  /** An app's own OIT limit (requests per minute while overloaded), if the config gives one. */
  appOitRpm(app: string): number | undefined {
    return this.#appOit.get(app);
  }

  /** Limits of an end user (`x-fairway-user`), if an operator set any. */
  userLimits(user: string): LimitsConfig | undefined {
    return this.#users.get(user);
  }

  /** Budgets of a tenant: its own if it has any, else the default budgets (if any). */
  tenantQuotas(tenant: string): QuotasConfig | undefined {
    return this.#tenantQuotas.get(tenant) ?? this.#defaultQuotas;
  }

  /** The default budgets, if any. */
  defaultQuotas(): QuotasConfig | undefined {
    return this.#defaultQuotas;
  }

  /** A tenant's own budgets (not the defaults), if any. */
  ownQuotas(tenant: string): QuotasConfig | undefined {
    return this.#tenantQuotas.get(tenant);
  }

  /** Every key with budgets of its own, by id. */
  keysWithQuotas(): [string, QuotasConfig][] {
    return [...this.#keyQuotas];
  }

  /** Budgets of one API key (by its `sha256:<hex>` id), if an operator set any. */
  keyQuotas(keyId: string): QuotasConfig | undefined {
    return this.#keyQuotas.get(keyId);
  }

  /**
   * Replaces the budgets of one scope; budgets without any amount remove them (a tenant then
   * uses the default budgets). Returns false for a tenant that does not exist.
   */
  setQuotas(scope: QuotaScope, id: string | undefined, quotas: QuotasConfig): boolean {
    const keep = hasQuotas(quotas) ? quotas : undefined;
    if (scope === 'default') {
      this.#defaultQuotas = keep;
      return true;
    }
    if (id === undefined || (scope === 'tenant' && !this.#tenants.has(id))) return false;
    const map = scope === 'tenant' ? this.#tenantQuotas : this.#keyQuotas;
    if (keep === undefined) map.delete(id);
    else map.set(id, keep);
    return true;
  }

  /** Adds a tenant or replaces one (weight, default SLO class and limits together). */
  upsertTenant(entry: TenantEntry): void {
    // Grants come from the config file; an admin event that re-issues the tenant keeps them.
    const grants = entry.grants ?? this.#tenants.get(entry.id)?.grants;
    this.#tenants.set(entry.id, grants === entry.grants ? entry : { ...entry, grants });
  }

  /** Removes a tenant; true if it existed. */
  deleteTenant(id: string): boolean {
    return this.#tenants.delete(id);
  }

  /**
   * Replaces the limits of one scope; empty limits remove an app's or user's limits and make a
   * tenant use the defaults. Returns false for a tenant that does not exist.
   */
  setLimits(scope: LimitsScope, id: string | undefined, limits: LimitsConfig): boolean {
    switch (scope) {
      case 'default':
        this.#defaults = limits;
        return true;
      case 'tenant': {
        const t = id === undefined ? undefined : this.#tenants.get(id);
        if (t === undefined) return false;
        this.#tenants.set(t.id, { ...t, limits });
        return true;
      }
      case 'app':
      case 'user': {
        if (id === undefined) return false;
        const map = scope === 'app' ? this.#apps : this.#users;
        if (hasLimits(limits)) map.set(id, limits);
        else map.delete(id);
        return true;
      }
    }
  }
}
