import { readFileSync } from 'node:fs';
import { hashApiKey } from '@fairway/dispatcher';
import type { Command } from 'commander';
import { ExitCode, UsageError } from '../cli-error.ts';
import type { CliIo } from '../cli-io.ts';

/** One row of `GET /admin/v1/usage`. */
interface UsageRow {
  day: string;
  tenant: string;
  key: string;
  model: string;
  requests: number;
  inputTokens: number;
  outputTokens: number;
  cost: number;
}

interface UsageFlags {
  url: string;
  adminTokenFile?: string;
  tenant?: string;
  key?: string;
  model?: string;
  from?: string;
  to?: string;
  json?: boolean;
}

/** The admin token (`--admin-token-file`, else `FAIRWAY_ADMIN_TOKEN_FILE`). */
function adminToken(flags: UsageFlags): string {
  const file = flags.adminTokenFile ?? process.env.FAIRWAY_ADMIN_TOKEN_FILE;
  if (file === undefined || file === '')
    throw new UsageError([
      '--admin-token-file: required (or set FAIRWAY_ADMIN_TOKEN_FILE): the admin API is operator-only',
    ]);
  try {
    return readFileSync(file, 'utf8').trim();
  } catch (err) {
    throw new UsageError([
      `--admin-token-file: cannot read ${file} (${(err as NodeJS.ErrnoException).code ?? 'unreadable'})`,
    ]);
  }
}

/** Right-aligned columns, the first four left-aligned. */
function table(rows: readonly (readonly string[])[]): string {
  const widths = rows[0]?.map((_, c) => Math.max(...rows.map((r) => (r[c] ?? '').length))) ?? [];
  return rows
    .map((r) =>
      r.map((cell, c) => (c < 4 ? cell.padEnd(widths[c] ?? 0) : cell.padStart(widths[c] ?? 0))).join('  '),
    )
    .join('\n');
}

const n = (x: number): string => x.toLocaleString('en-US');

/**
 * Adds `fairway admin usage`: recorded usage per day, tenant, key and model from a dispatcher's
 * admin API (`GET /admin/v1/usage` on its operator port), as a table or JSON.
 */
export function registerAdminUsageCommand(admin: Command, io: CliIo, setCode: (code: number) => void): void {
  admin
    .command('usage')
    .description(
      "usage per UTC day, tenant, key and model (requests, tokens, cost) from a dispatcher's admin API",
    )
    .option(
      '--url <url>',
      "a dispatcher's operator port",
      process.env.FAIRWAY_ADMIN_URL ?? 'http://127.0.0.1:9464',
    )
    .option('--admin-token-file <file>', 'file holding the admin token (env FAIRWAY_ADMIN_TOKEN_FILE)')
    .option('--tenant <id>', 'only this tenant')
    .option('--key <key>', 'only this API key (the key itself or its sha256: id)')
    .option('--model <name>', 'only this model')
    .option('--from <day>', 'first UTC day, YYYY-MM-DD (default: the first of the month)')
    .option('--to <day>', 'last UTC day, YYYY-MM-DD (default: today)')
    .option('--json', 'the API answer as JSON')
    .action(async (f: UsageFlags) => {
      const token = adminToken(f);
      const q = new URLSearchParams();
      if (f.tenant !== undefined) q.set('tenant', f.tenant);
      if (f.key !== undefined) q.set('key', f.key.startsWith('sha256:') ? f.key : hashApiKey(f.key));
      if (f.model !== undefined) q.set('model', f.model);
      if (f.from !== undefined) q.set('from', f.from);
      if (f.to !== undefined) q.set('to', f.to);
      const url = `${f.url.replace(/\/+$/, '')}/admin/v1/usage?${q}`;
      let res: Response;
      try {
        res = await fetch(url, { headers: { authorization: `Bearer ${token}` } });
      } catch (err) {
        throw new Error(`cannot reach ${f.url}: ${(err as Error).message}`);
      }
      const body = (await res.json().catch(() => ({}))) as {
        data?: UsageRow[];
        totals?: Omit<UsageRow, 'day' | 'tenant' | 'key' | 'model'>;
        from?: string;
        to?: string;
        error?: { message?: string };
      };
      if (!res.ok) {
        const why = `the admin API answered ${res.status}: ${body.error?.message ?? ''}`;
        throw res.status === 400 ? new UsageError([why]) : new Error(why);
      }
      if (f.json) io.out(`${JSON.stringify(body)}\n`);
      else {
        const rows = body.data ?? [];
        const t = body.totals ?? { requests: 0, inputTokens: 0, outputTokens: 0, cost: 0 };
        io.out(`usage ${body.from} .. ${body.to} (UTC)\n`);
        io.out(
          `${table([
            ['day', 'tenant', 'key', 'model', 'requests', 'input tokens', 'output tokens', 'cost'],
            ...rows.map((r) => [
              r.day,
              r.tenant,
              r.key === '' ? '-' : `${r.key.slice(0, 19)}…`,
              r.model,
              n(r.requests),
              n(r.inputTokens),
              n(r.outputTokens),
              r.cost.toFixed(6),
            ]),
            ['total', '', '', '', n(t.requests), n(t.inputTokens), n(t.outputTokens), t.cost.toFixed(6)],
          ])}\n`,
        );
      }
      setCode(ExitCode.OK);
    });
}
