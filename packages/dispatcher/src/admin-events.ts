import type { AdminEvent, AdminEventRecord, Bus, Unsubscribe } from '@fairway/bus';
import { configIdSchema, type Logger } from '@fairway/core';
import type { KeyRing } from './auth.ts';
import type { TenantDirectory } from './tenant-directory.ts';

/** What applying one admin event did. */
export type AdminOutcome =
  | { readonly applied: true }
  /** The event was valid on the bus but names something this dispatcher cannot act on. */
  | { readonly applied: false; readonly reason: string };

/** Options of {@link AdminEventApplier}. */
export interface AdminEventApplierOptions {
  readonly keys: KeyRing;
  readonly tenants: TenantDirectory;
  /** SLO classes a key may name. */
  readonly sloClasses: ReadonlySet<string>;
  /** Called with every tenant an event adds (bounded metric labels). @default none */
  readonly onTenant?: ((tenant: string) => void) | undefined;
  readonly logger: Logger;
}

const APPLIED: AdminOutcome = { applied: true };

/**
 * Applies operator changes — tenants, keys and limits — to one dispatcher's key ring and tenant
 * directory, in stream order. Every dispatcher applies the same events in the same order, so all
 * of them authenticate, weigh and limit alike; an event that cannot apply (a key for a tenant that
 * does not exist) is skipped with a warning on every dispatcher alike.
 */
export class AdminEventApplier {
  readonly #o: AdminEventApplierOptions;
  #lastSeq = 0;

  constructor(options: AdminEventApplierOptions) {
    this.#o = options;
  }

  /** Sequence number of the last event applied or skipped; 0 before the first. */
  get lastSeq(): number {
    return this.#lastSeq;
  }

  /** Applies one event of the stream; events at or below `lastSeq` (redeliveries) are ignored. */
  apply(record: AdminEventRecord): AdminOutcome {
    if (record.seq <= this.#lastSeq)
      return { applied: false, reason: `sequence ${record.seq} already applied` };
    this.#lastSeq = record.seq;
    const outcome = this.#apply(record.event);
    const log = this.#o.logger;
    if (outcome.applied) log.info({ seq: record.seq, type: record.event.type }, 'admin: event applied');
    else
      log.warn({ seq: record.seq, type: record.event.type, reason: outcome.reason }, 'admin: event skipped');
    return outcome;
  }

  #apply(e: AdminEvent): AdminOutcome {
    const { keys, tenants } = this.#o;
    switch (e.type) {
      case 'tenantUpsert': {
        // Tenant ids scope users, windows and metric labels: the config file's alphabet only.
        if (!configIdSchema.safeParse(e.tenant.id).success)
          return { applied: false, reason: 'tenant id must be 1-64 letters, digits, ".", "_", ":" or "-"' };
        if (e.tenant.sloClass !== undefined && !this.#o.sloClasses.has(e.tenant.sloClass))
          return { applied: false, reason: `unknown SLO class "${e.tenant.sloClass}"` };
        tenants.upsertTenant({
          id: e.tenant.id,
          weight: e.tenant.weight,
          sloClass: e.tenant.sloClass,
          limits: e.tenant.limits,
        });
        this.#o.onTenant?.(e.tenant.id);
        return APPLIED;
      }
      case 'tenantDelete':
        if (!tenants.deleteTenant(e.tenantId)) return { applied: false, reason: `no tenant "${e.tenantId}"` };
        keys.revokeTenant(e.tenantId);
        return APPLIED;
      case 'keyAdd':
        if (!tenants.has(e.tenantId)) return { applied: false, reason: `no tenant "${e.tenantId}"` };
        if (e.sloClass !== undefined && !this.#o.sloClasses.has(e.sloClass))
          return { applied: false, reason: `unknown SLO class "${e.sloClass}"` };
        {
          // A key authenticates as one tenant; re-issuing it to another would hand that tenant
          // the first one's traffic and bill. The owner must revoke it first.
          const owner = keys.ownerOf(e.keyHash);
          if (owner !== undefined && owner !== e.tenantId)
            return {
              applied: false,
              reason: `key already belongs to tenant "${owner}"; refused for tenant "${e.tenantId}"`,
            };
        }
        keys.add(e.keyHash, { tenant: e.tenantId, app: e.app, sloClass: e.sloClass });
        return APPLIED;
      case 'keyRevoke':
        return keys.revoke(e.keyHash) ? APPLIED : { applied: false, reason: 'no such key' };
      case 'limitsSet':
        return tenants.setLimits(e.scope, e.id, e.limits)
          ? APPLIED
          : { applied: false, reason: `no ${e.scope} "${e.id ?? ''}"` };
    }
  }
}

/**
 * Brings `applier` up to date with the bus's admin history (every stored event, in order), then
 * keeps applying new events as they are published. Resolves once the stored history is applied,
 * so a dispatcher that awaits it before serving starts with the same view as the others.
 */
export async function followAdminEvents(bus: Bus, applier: AdminEventApplier): Promise<Unsubscribe> {
  for (const record of await bus.replayAdminEvents(applier.lastSeq + 1)) applier.apply(record);
  return bus.subscribeAdminEvents(
    (record) => {
      applier.apply(record);
    },
    { fromSeq: applier.lastSeq + 1 },
  );
}
