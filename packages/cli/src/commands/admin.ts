import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  type AdminEventInput,
  adminEventSchema,
  type Bus,
  generateOperatorKeyPair,
  NatsBus,
  OperatorSigner,
} from '@fairway/bus';
import { hashApiKey, keyExpiry, newApiKey } from '@fairway/dispatcher';
import type { Command } from 'commander';
import { positiveNumber, wholeNumber } from '../cli-args.ts';
import { ExitCode, UsageError } from '../cli-error.ts';
import type { CliIo } from '../cli-io.ts';
import { addNatsFlags, type NatsFlags, natsSecurityOf } from '../nats-flags.ts';
import { registerAdminUsageCommand } from './admin-usage.ts';

/** Connection flags every `fairway admin` subcommand takes. */
interface BusFlags extends NatsFlags {
  natsUrl: string;
  prefix: string;
  by?: string;
  operatorKey?: string;
}

/** Limit flags of `tenant` and `limits`. */
interface LimitFlags {
  rpm?: number;
  tpm?: number;
  maxQueued?: number;
}

function limitsOf(f: LimitFlags): { rpm?: number; tpm?: number; maxQueued?: number } {
  return {
    ...(f.rpm !== undefined ? { rpm: f.rpm } : {}),
    ...(f.tpm !== undefined ? { tpm: f.tpm } : {}),
    ...(f.maxQueued !== undefined ? { maxQueued: f.maxQueued } : {}),
  };
}

/** Validates an event as every dispatcher will, so a bad one is refused here with one line per problem. */
function checked(event: AdminEventInput): AdminEventInput {
  const parsed = adminEventSchema.safeParse(event);
  if (!parsed.success)
    throw new UsageError(
      parsed.error.issues.map((i) => `${i.path.length > 0 ? `${i.path.join('.')}: ` : ''}${i.message}`),
    );
  return event;
}

/** `--expires`: an ISO-8601 time or a duration from `nowMs` (`30d`, `12h`, `90m`), in the future. */
function expiryFlag(text: string, nowMs: number): number {
  const at = keyExpiry(text, nowMs);
  if (at === 'invalid')
    throw new UsageError([
      '--expires: give an ISO-8601 time (2027-01-31T00:00:00Z) or a duration like 30d, 12h, 90m',
    ]);
  if (at === 'past') throw new UsageError(['--expires: must be in the future']);
  return at;
}

/**
 * The operator key that signs every event (`--operator-key`, else `FAIRWAY_OPERATOR_KEY_FILE`):
 * dispatchers on NATS apply nothing unsigned, so publishing without one is refused here.
 */
function operatorSigner(flags: BusFlags): OperatorSigner {
  const file = flags.operatorKey ?? process.env.FAIRWAY_OPERATOR_KEY_FILE;
  if (file === undefined || file === '')
    throw new UsageError([
      '--operator-key: required (or set FAIRWAY_OPERATOR_KEY_FILE): dispatchers apply only admin events signed by the operator key; create one with `fairway admin keygen`',
    ]);
  let pem: Buffer;
  try {
    pem = readFileSync(file);
  } catch (err) {
    throw new UsageError([
      `--operator-key: cannot read ${file} (${(err as NodeJS.ErrnoException).code ?? 'unreadable'})`,
    ]);
  }
  try {
    return OperatorSigner.fromPem(pem, file);
  } catch (err) {
    throw new UsageError([`--operator-key: ${err instanceof Error ? err.message : String(err)}`]);
  }
}

async function withBus<T>(flags: BusFlags, fn: (bus: Bus) => Promise<T>): Promise<T> {
  const bus = await NatsBus.connect({
    servers: flags.natsUrl,
    prefix: flags.prefix,
    name: 'fairway admin',
    security: natsSecurityOf(flags),
  });
  try {
    return await fn(bus);
  } finally {
    await bus.close();
  }
}

/**
 * Adds `fairway admin` to the program: operator changes (tenants, API keys, limits) signed with the
 * operator's Ed25519 key and published to the fleet's durable admin-event stream on NATS, which
 * every dispatcher replays at start and follows live, applying only events its keys verify.
 */
export function registerAdminCommand(program: Command, io: CliIo, setCode: (code: number) => void): void {
  const admin = program
    .command('admin')
    .description(
      'change tenants, API keys and limits on a running fleet: events on the NATS admin stream that every dispatcher applies in order (and replays when it starts)',
    );
  const connection = (cmd: Command): Command =>
    addNatsFlags(
      cmd
        .option('--nats-url <url>', 'NATS server', process.env.NATS_URL ?? 'nats://127.0.0.1:4222')
        .option(
          '--prefix <prefix>',
          'NATS subject prefix of the fleet',
          process.env.FAIRWAY_PREFIX ?? 'fairway',
        ),
    );
  const common = (cmd: Command): Command =>
    connection(cmd)
      .option('--by <name>', 'who makes the change (recorded in the event)')
      .option(
        '--operator-key <file>',
        'operator private key that signs the event (env FAIRWAY_OPERATOR_KEY_FILE; see `fairway admin keygen`)',
      );
  const publish = async (flags: BusFlags, event: AdminEventInput): Promise<void> => {
    const signed = operatorSigner(flags).sign(checked(event), flags.prefix);
    const seq = await withBus(flags, (bus) => bus.publishAdminEvent(signed));
    io.out(`published ${event.type} as admin event ${seq}, signed by ${signed.keyId}\n`);
    setCode(ExitCode.OK);
  };

  admin
    .command('keygen')
    .description(
      'create the operator key pair that signs admin events: <name>.key (private, mode 0600; give it to `fairway admin --operator-key`) and <name>.pub (public; give it to every dispatcher as FAIRWAY_OPERATOR_PUBLIC_KEY_FILE)',
    )
    .option('--out-dir <dir>', 'directory to write the two files in (created, mode 0700, if missing)', '.')
    .option('--name <name>', 'file name stem', 'fairway-operator')
    .action((f: { outDir: string; name: string }) => {
      const privatePath = join(f.outDir, `${f.name}.key`);
      const publicPath = join(f.outDir, `${f.name}.pub`);
      const existing = [privatePath, publicPath].filter((p) => existsSync(p));
      if (existing.length > 0)
        throw new UsageError(existing.map((p) => `${p}: already exists; remove it or pick another --name`));
      // Only a folder this creates gets 0700: an existing one keeps the mode its owner chose.
      mkdirSync(f.outDir, { recursive: true, mode: 0o700 });
      const pair = generateOperatorKeyPair();
      writeFileSync(privatePath, pair.privateKeyPem, { mode: 0o600, flag: 'wx' });
      writeFileSync(publicPath, pair.publicKeyPem, { mode: 0o644, flag: 'wx' });
      io.out(
        `operator key ${pair.keyId}\n  private ${privatePath} (keep it secret; mode 0600)\n  public  ${publicPath}\n`,
      );
      setCode(ExitCode.OK);
    });
  const by = (f: BusFlags): { by?: string } => (f.by !== undefined ? { by: f.by } : {});

  common(
    admin
      .command('tenant')
      .description('add a tenant or replace its weight, default SLO class and limits')
      .argument('<id>', 'tenant id')
      .option('--weight <w>', 'share weight (weighted VTC)', positiveNumber, 1)
      .option('--slo-class <name>', 'SLO class of its keys that name none')
      .option('--rpm <n>', 'requests per minute', wholeNumber)
      .option('--tpm <n>', 'tokens per minute', wholeNumber)
      .option('--max-queued <n>', 'requests it may have queued at once', wholeNumber),
  ).action(async (id: string, f: BusFlags & LimitFlags & { weight: number; sloClass?: string }) => {
    await publish(f, {
      type: 'tenantUpsert',
      at: Date.now(),
      ...by(f),
      tenant: {
        id,
        weight: f.weight,
        ...(f.sloClass !== undefined ? { sloClass: f.sloClass } : {}),
        limits: limitsOf(f),
      },
    });
  });

  common(
    admin
      .command('tenant-delete')
      .description('remove a tenant and revoke all its keys (its queued requests still finish)')
      .argument('<id>', 'tenant id'),
  ).action(async (id: string, f: BusFlags) => {
    await publish(f, { type: 'tenantDelete', at: Date.now(), ...by(f), tenantId: id });
  });

  common(
    admin
      .command('key-add')
      .description('issue an API key for a tenant; prints the key once (only its SHA-256 hash is sent)')
      .argument('<tenant>', 'tenant id')
      .option('--key <key>', 'use this key instead of a new random one')
      .option('--app <id>', 'bind the key to an app')
      .option('--slo-class <name>', "the key's SLO class (default: the tenant's)")
      .option(
        '--expires <when>',
        'when the key stops working: an ISO-8601 time, or a duration from now like 30d, 12h, 90m',
      ),
  ).action(
    async (
      tenant: string,
      f: BusFlags & { key?: string; app?: string; sloClass?: string; expires?: string },
    ) => {
      const key = f.key ?? newApiKey();
      if (key.length < 8) throw new UsageError(['--key: must be at least 8 characters']);
      const expiresAt = f.expires === undefined ? undefined : expiryFlag(f.expires, Date.now());
      await publish(f, {
        type: 'keyAdd',
        at: Date.now(),
        ...by(f),
        tenantId: tenant,
        keyHash: hashApiKey(key),
        ...(f.app !== undefined ? { app: f.app } : {}),
        ...(f.sloClass !== undefined ? { sloClass: f.sloClass } : {}),
        ...(expiresAt !== undefined ? { expiresAt } : {}),
      });
      if (f.key === undefined) io.out(`api key (shown once): ${key}\n`);
    },
  );

  common(
    admin
      .command('key-revoke')
      .description('revoke an API key, given the key or its hash')
      .option('--key <key>', 'the key')
      .option('--hash <sha256:hex>', "the key's stored hash"),
  ).action(async (f: BusFlags & { key?: string; hash?: string }) => {
    if ((f.key === undefined) === (f.hash === undefined))
      throw new UsageError(['give exactly one of --key and --hash']);
    await publish(f, {
      type: 'keyRevoke',
      at: Date.now(),
      ...by(f),
      keyHash: f.hash ?? hashApiKey(f.key ?? ''),
    });
  });

  common(
    admin
      .command('limits')
      .description(
        'set the RPM/TPM/queue limits of a tenant, app or user, or the defaults; no limit flags clears them',
      )
      .argument('<scope>', 'tenant, app, user or default')
      .argument('[id]', 'the tenant, app or user (none for default)')
      .option('--rpm <n>', 'requests per minute', wholeNumber)
      .option('--tpm <n>', 'tokens per minute', wholeNumber)
      .option('--max-queued <n>', 'requests it may have queued at once', wholeNumber),
  ).action(async (scope: string, id: string | undefined, f: BusFlags & LimitFlags) => {
    if (!['tenant', 'app', 'user', 'default'].includes(scope))
      throw new UsageError([`scope: must be tenant, app, user or default, not "${scope}"`]);
    await publish(f, {
      type: 'limitsSet',
      at: Date.now(),
      ...by(f),
      scope: scope as 'tenant' | 'app' | 'user' | 'default',
      ...(id !== undefined ? { id } : {}),
      limits: limitsOf(f),
    });
  });

  common(
    admin
      .command('quota')
      .description(
        'set the token and spend budgets of a tenant, a key or the default (per UTC day and month); no budget flags clears them',
      )
      .argument('<scope>', 'tenant, key or default')
      .argument('[id]', 'the tenant id, or the key (or its sha256: id); none for default')
      .option('--tokens-per-day <n>', 'input + output tokens per UTC day', wholeNumber)
      .option('--tokens-per-month <n>', 'input + output tokens per UTC month', wholeNumber)
      .option('--spend-per-day <x>', 'cost per UTC day, at the configured prices', positiveNumber)
      .option('--spend-per-month <x>', 'cost per UTC month, at the configured prices', positiveNumber)
      .option(
        '--alert-at <fraction>',
        'fraction of a budget that raises its alert (default 0.8)',
        positiveNumber,
      ),
  ).action(
    async (
      scope: string,
      id: string | undefined,
      f: BusFlags & {
        tokensPerDay?: number;
        tokensPerMonth?: number;
        spendPerDay?: number;
        spendPerMonth?: number;
        alertAt?: number;
      },
    ) => {
      if (!['tenant', 'key', 'default'].includes(scope))
        throw new UsageError([`scope: must be tenant, key or default, not "${scope}"`]);
      const target = scope === 'key' && id !== undefined && !id.startsWith('sha256:') ? hashApiKey(id) : id;
      const { tokensPerDay, tokensPerMonth, spendPerDay, spendPerMonth, alertAt } = f;
      const quotas = Object.fromEntries(
        Object.entries({ tokensPerDay, tokensPerMonth, spendPerDay, spendPerMonth, alertAt }).filter(
          ([, v]) => v !== undefined,
        ),
      );
      await publish(f, {
        type: 'quotaSet',
        at: Date.now(),
        ...by(f),
        scope: scope as 'tenant' | 'key' | 'default',
        ...(target !== undefined ? { id: target } : {}),
        quotas,
      });
    },
  );

  registerAdminUsageCommand(admin, io, setCode);

  connection(
    admin
      .command('events')
      .description('print the admin-event history, oldest first')
      .option('--from <seq>', 'first sequence number', wholeNumber, 1)
      .option('--json', 'one JSON object per line'),
  ).action(async (f: BusFlags & { from: number; json?: boolean }) => {
    const records = await withBus(f, (bus) => bus.replayAdminEvents(Math.max(1, f.from)));
    for (const r of records) {
      if (f.json)
        io.out(`${JSON.stringify({ seq: r.seq, event: r.event, keyId: r.signed?.keyId ?? null })}\n`);
      else {
        const { type, at, nonce: _nonce, fleet: _fleet, ...rest } = r.event;
        const signer = r.signed?.keyId ?? 'unsigned';
        io.out(`${r.seq}\t${new Date(at).toISOString()}\t${type}\t${JSON.stringify(rest)}\t${signer}\n`);
      }
    }
    setCode(ExitCode.OK);
  });
}
