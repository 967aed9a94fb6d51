/**
 * NATS credentials and TLS, from flags, environment and config, turned into nats.js connection
 * options — NATS's own mechanisms only: user/password, token, NKey, `.creds` (JWT) and TLS with a
 * CA and optional client certificate. Nothing here ever puts a secret into a message.
 */
import { readFileSync } from 'node:fs';
import {
  type NatsAuthConfig,
  type NatsTlsConfig,
  natsAuthConfigSchema,
  natsTlsConfigSchema,
  parseWith,
  redactUrls,
} from '@fairway/core';
import { fromSeed } from '@nats-io/nkeys';
import {
  type Authenticator,
  type ConnectionOptions,
  credsAuthenticator,
  nkeyAuthenticator,
} from '@nats-io/transport-node';
import { z } from 'zod';
import { BusError, BusErrorCode } from './errors.ts';

/** How a process authenticates to NATS and whether it uses TLS. */
export interface NatsSecurity {
  readonly auth?: NatsAuthConfig;
  readonly tls?: NatsTlsConfig;
}

/** The environment variables {@link natsSecurityFromEnv} reads, each optional. */
export const natsEnvSchema = z.object({
  NATS_USER: z.string().min(1).optional(),
  NATS_PASSWORD: z.string().min(1).optional(),
  NATS_TOKEN: z.string().min(1).optional(),
  NATS_NKEY_SEED_FILE: z.string().min(1).optional(),
  NATS_CREDS_FILE: z.string().min(1).optional(),
  NATS_TLS_CA_FILE: z.string().min(1).optional(),
  NATS_TLS_CERT_FILE: z.string().min(1).optional(),
  NATS_TLS_KEY_FILE: z.string().min(1).optional(),
});

function defined<T extends object>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined && v !== '')) as Partial<T>;
}

/**
 * Reads `NATS_USER`, `NATS_PASSWORD`, `NATS_TOKEN`, `NATS_NKEY_SEED_FILE`, `NATS_CREDS_FILE`,
 * `NATS_TLS_CA_FILE`, `NATS_TLS_CERT_FILE` and `NATS_TLS_KEY_FILE`; empty values count as unset.
 */
export function natsSecurityFromEnv(env: Readonly<Record<string, string | undefined>>): NatsSecurity {
  const known = defined(Object.fromEntries(Object.keys(natsEnvSchema.shape).map((k) => [k, env[k]])));
  const e = parseWith(natsEnvSchema, known, 'environment');
  return {
    auth: defined({
      user: e.NATS_USER,
      password: e.NATS_PASSWORD,
      token: e.NATS_TOKEN,
      nkeySeedFile: e.NATS_NKEY_SEED_FILE,
      credsFile: e.NATS_CREDS_FILE,
    }),
    tls: defined({
      caFile: e.NATS_TLS_CA_FILE,
      certFile: e.NATS_TLS_CERT_FILE,
      keyFile: e.NATS_TLS_KEY_FILE,
    }),
  };
}

/**
 * Layers of settings, highest priority first, field by field as {@link mergeNatsSecurity} does, but
 * not yet validated: for the layers above one still to come (flags and environment, before the
 * config file is read), where a password alone is fine if the user comes later.
 */
export function layerNatsSecurity(...layers: readonly (NatsSecurity | undefined)[]): {
  auth: NatsAuthConfig;
  tls: Partial<NatsTlsConfig>;
} {
  const auth: Record<string, string> = {};
  const tls: Record<string, string> = {};
  for (const l of [...layers].reverse()) {
    Object.assign(auth, defined(l?.auth ?? {}));
    Object.assign(tls, defined(l?.tls ?? {}));
  }
  return { auth, tls };
}

/**
 * Layers of settings, highest priority first (flags, then environment, then the config file): each
 * field comes from the first layer that sets it. The result is validated: one credential mechanism
 * (a token on the command line and a user in the config file is an error, not a guess), TLS
 * certificate and key together.
 */
export function mergeNatsSecurity(...layers: readonly (NatsSecurity | undefined)[]): NatsSecurity {
  const { auth, tls } = layerNatsSecurity(...layers);
  return {
    ...(Object.keys(auth).length > 0
      ? { auth: parseWith(natsAuthConfigSchema, auth, 'NATS credentials') }
      : {}),
    ...(Object.keys(tls).length > 0 ? { tls: parseWith(natsTlsConfigSchema, tls, 'NATS TLS') } : {}),
  };
}

/** What a server URL's user part means to NATS: `user:pass@` is a user, a lone `token@` a token. */
function credentialsInUrl(url: string): { server: string; auth?: NatsAuthConfig } {
  const m = /^([A-Za-z][A-Za-z0-9+.-]*:\/\/)([^/?#@\s]*)@(.*)$/.exec(url);
  if (!m) return { server: url };
  const [, scheme, info = '', rest] = m;
  const colon = info.indexOf(':');
  const auth: NatsAuthConfig =
    colon < 0
      ? { token: decodeURIComponent(info) }
      : {
          user: decodeURIComponent(info.slice(0, colon)),
          password: decodeURIComponent(info.slice(colon + 1)),
        };
  return { server: `${scheme}${rest}`, auth };
}

function readSecretFile(file: string, what: string): Uint8Array {
  try {
    return readFileSync(file);
  } catch (cause) {
    const code = (cause as NodeJS.ErrnoException).code ?? 'unreadable';
    throw new BusError(BusErrorCode.SETUP_FAILED, `cannot read the NATS ${what} file ${file}: ${code}`);
  }
}

function authenticatorOf(auth: NatsAuthConfig): Authenticator | undefined {
  if (auth.nkeySeedFile !== undefined) {
    const seed = new TextDecoder().decode(readSecretFile(auth.nkeySeedFile, 'NKey seed')).trim();
    const bytes = new TextEncoder().encode(seed);
    try {
      fromSeed(bytes);
    } catch {
      throw new BusError(
        BusErrorCode.SETUP_FAILED,
        `the NATS NKey seed file ${auth.nkeySeedFile} does not hold an NKey seed (a line starting "SU")`,
      );
    }
    return nkeyAuthenticator(bytes);
  }
  if (auth.credsFile !== undefined) return credsAuthenticator(readSecretFile(auth.credsFile, 'credentials'));
  return undefined;
}

/**
 * nats.js connection options for `servers` with `security`: credentials written in a URL
 * (`nats://user:pass@host`) are taken out of it and sent as NATS credentials, because nats.js
 * does not use them (the server then answers "Authorization Violation") and because the URL
 * would otherwise be printed. Throws a {@link BusError} that names the problem, never a secret.
 */
export function natsConnectionOptions(
  servers: string | readonly string[],
  security: NatsSecurity = {},
): Pick<ConnectionOptions, 'servers' | 'user' | 'pass' | 'token' | 'authenticator' | 'tls'> {
  const list = typeof servers === 'string' ? servers.split(',').map((s) => s.trim()) : [...servers];
  const parsed = list.map(credentialsInUrl);
  const fromUrls = parsed.flatMap((p) => (p.auth === undefined ? [] : [p.auth]));
  const distinct = new Set(fromUrls.map((a) => JSON.stringify(a)));
  if (distinct.size > 1)
    throw new BusError(
      BusErrorCode.SETUP_FAILED,
      'the NATS URLs carry different credentials; give them once',
    );
  const urlAuth = fromUrls[0];
  const given = security.auth !== undefined && Object.keys(defined(security.auth)).length > 0;
  if (urlAuth !== undefined && given)
    throw new BusError(
      BusErrorCode.SETUP_FAILED,
      `NATS credentials are given both in the URL (${redactUrls(list.join(','))}) and as settings; give them once`,
    );
  const auth = urlAuth ?? security.auth ?? {};
  const tls = defined(security.tls ?? {});
  const useTls = Object.keys(tls).length > 0 || list.some((s) => /^tls:\/\//i.test(s));
  const authenticator = authenticatorOf(auth);
  return {
    servers: parsed.map((p) => p.server),
    ...(auth.user !== undefined ? { user: auth.user } : {}),
    ...(auth.password !== undefined ? { pass: auth.password } : {}),
    ...(auth.token !== undefined ? { token: auth.token } : {}),
    ...(authenticator !== undefined ? { authenticator } : {}),
    ...(useTls ? { tls } : {}),
  };
}

/** A short description of how a process authenticates to `servers`, for start-up logs (no secret). */
export function describeNatsSecurity(
  security: NatsSecurity,
  servers: string | readonly string[] = [],
): string {
  const list = typeof servers === 'string' ? servers.split(',') : [...servers];
  const inUrl = list.map((s) => credentialsInUrl(s.trim()).auth).find((a) => a !== undefined);
  const a = inUrl ?? security.auth ?? {};
  const how =
    a.credsFile !== undefined
      ? `creds file ${a.credsFile}`
      : a.nkeySeedFile !== undefined
        ? `nkey seed file ${a.nkeySeedFile}`
        : a.token !== undefined
          ? 'token'
          : a.user !== undefined
            ? `user ${a.user}`
            : 'no credentials';
  return Object.keys(defined(security.tls ?? {})).length > 0 ? `${how}, TLS` : how;
}
