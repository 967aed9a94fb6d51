import type { UsageQuery, UsageRow } from './store.ts';

/**
 * One day's usage as both backends keep it: field `<metric><len>.<tenant>:<len>.<key>:<model>`
 * (metric `r` requests, `i` input tokens, `o` output tokens, `c` cost; lengths in bytes, as
 * `tenantScoped` prefixes) → value. Tenant ids and key ids are ASCII (config alphabet, `sha256:`).
 */
export function usageField(
  metric: 'r' | 'i' | 'o' | 'c',
  tenant: string,
  key: string,
  model: string,
): string {
  return `${metric}${tenant.length}.${tenant}:${key.length}.${key}:${model}`;
}

function parseField(field: string): { metric: string; tenant: string; key: string; model: string } {
  let at = 1;
  const take = (): string => {
    const dot = field.indexOf('.', at);
    const len = Number(field.slice(at, dot));
    const value = field.slice(dot + 1, dot + 1 + len);
    at = dot + 1 + len + 1;
    return value;
  };
  const tenant = take();
  const key = take();
  return { metric: field.slice(0, 1), tenant, key, model: field.slice(at) };
}

/** The rows of `query` from each day's fields, in day order, then tenant, key and model order. */
export function usageRows(
  query: UsageQuery,
  days: readonly { readonly day: string; readonly fields: ReadonlyMap<string, number> }[],
): UsageRow[] {
  const rows: UsageRow[] = [];
  for (const { day, fields } of days) {
    const byRow = new Map<
      string,
      { tenant: string; key: string; model: string; m: Record<string, number> }
    >();
    for (const [field, value] of fields) {
      const f = parseField(field);
      if (query.tenant !== undefined && f.tenant !== query.tenant) continue;
      if (query.key !== undefined && f.key !== query.key) continue;
      if (query.model !== undefined && f.model !== query.model) continue;
      const id = field.slice(1);
      let row = byRow.get(id);
      if (row === undefined) {
        row = { tenant: f.tenant, key: f.key, model: f.model, m: {} };
        byRow.set(id, row);
      }
      row.m[f.metric] = value;
    }
    const sorted = [...byRow.values()].sort((a, b) =>
      a.tenant !== b.tenant
        ? a.tenant < b.tenant
          ? -1
          : 1
        : a.key !== b.key
          ? a.key < b.key
            ? -1
            : 1
          : a.model < b.model
            ? -1
            : a.model > b.model
              ? 1
              : 0,
    );
    for (const r of sorted)
      rows.push({
        day,
        tenant: r.tenant,
        key: r.key,
        model: r.model,
        requests: r.m.r ?? 0,
        inputTokens: r.m.i ?? 0,
        outputTokens: r.m.o ?? 0,
        cost: r.m.c ?? 0,
      });
  }
  return rows;
}
